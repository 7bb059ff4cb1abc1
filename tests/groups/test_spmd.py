"""``actormesh.spmd``: torchrun's environment on every process of a mesh, and
``SPMDActor.main`` running a training script there, as Monarch's ``monarch.spmd``."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from groups_actors import ElasticPeer

from actormesh.actor import ProcMesh, this_host
from actormesh.spmd import SPMDActor, setup_torch_elastic_env

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def procs() -> Iterator[ProcMesh]:
    mesh = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def test_setup_torch_elastic_env_lets_torch_distributed_init_from_env(procs: ProcMesh) -> None:
    setup_torch_elastic_env(procs)
    peers = procs.spawn("peers", ElasticPeer)
    environments = peers.environment.call().get(timeout=30)
    assert [(e["RANK"], e["LOCAL_RANK"]) for e in environments.values()] == [("0", "0"), ("1", "1")]
    assert {e["WORLD_SIZE"] for e in environments.values()} == {"2"}
    assert {e["LOCAL_WORLD_SIZE"] for e in environments.values()} == {"2"}
    assert {e["GROUP_RANK"] for e in environments.values()} == {"0"}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in environments.values()}) == 1
    sums = peers.all_reduce.call(1.5).get(timeout=60)
    assert sums.values() == [3.0, 3.0]


def test_spmd_actor_runs_a_script_on_every_rank(procs: ProcMesh, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, os, sys
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            total = torch.tensor([float(os.environ["RANK"]) + 1])
            dist.all_reduce(total)
            out = {"argv": sys.argv, "sum": total.item(), "name": __name__}
            path = os.path.join(os.path.dirname(__file__), f"rank{os.environ['RANK']}.json")
            with open(path, "w") as f:
                json.dump(out, f)
            dist.destroy_process_group()
            """
        )
    )
    actors = procs.spawn("_SPMDActor", SPMDActor)
    first = actors.slice(**dict.fromkeys(actors.extent.keys(), 0))
    address, port = first.get_host_port.call_one(None).get(timeout=30)
    assert isinstance(port, int) and port > 0
    done = actors.main.call(address, port, [str(script), "--lr", "0.1"]).get(timeout=90)
    assert done.values() == [True, True]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["sum"] for r in results] == [3.0, 3.0]
    assert results[0]["argv"] == [str(script), "--lr", "0.1"]
    assert results[0]["name"] == "__main__"


def test_main_without_a_script_says_so(procs: ProcMesh) -> None:
    actors = procs.spawn("_SPMDActor_empty", SPMDActor)
    with pytest.raises(ValueError, match="no script or module"):
        actors.main.call("127.0.0.1", 1, []).get(timeout=30)
