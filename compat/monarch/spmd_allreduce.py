"""``monarch.spmd`` 0.7: torch elastic's environment on a process mesh, and SPMD scripts.

1. ``setup_torch_elastic_env(procs)`` sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...
   in every process of a 2 x 2 mesh; an actor spawned there then joins a
   ``torch.distributed`` gloo group from the environment alone and ``all_reduce``s.
2. ``SPMDActor`` as the ``spmd_ddp.py`` example uses it: ``get_host_port`` on the first
   actor, then ``main(addr, port, [script])`` runs a torchrun-style script (written to a
   temporary file here) in every process; the script all-reduces and records its result.
"""

from __future__ import annotations

import os
import tempfile
import textwrap

from monarch.actor import Actor, endpoint, this_host
from monarch.spmd import SPMDActor, setup_torch_elastic_env


class Reducer(Actor):
    @endpoint
    def reduce(self):
        import torch
        import torch.distributed as dist

        env = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
        dist.init_process_group(backend="gloo")
        try:
            t = torch.tensor([float(dist.get_rank() + 1)])
            dist.all_reduce(t)
            return env, dist.get_rank(), dist.get_world_size(), float(t.item())
        finally:
            dist.destroy_process_group()


procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
setup_torch_elastic_env(procs)
results = procs.spawn("reducer", Reducer).reduce.call().get()
print(results.values())
for point, (env, rank, world, total) in results.items():
    assert rank == point.rank == int(env["RANK"]), (point, env)
    assert env["LOCAL_RANK"] == str(point["gpus"]) and env["WORLD_SIZE"] == "4"
    assert world == 4 and total == 1 + 2 + 3 + 4
print("setup_torch_elastic_env + gloo all_reduce OK")

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    t = torch.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    out = os.path.join(sys.argv[1], f"rank{dist.get_rank()}.txt")
    with open(out, "w") as f:
        f.write(f"{os.environ['RANK']} {os.environ['WORLD_SIZE']} {t.tolist()}")
    dist.destroy_process_group()
    """
)

with tempfile.TemporaryDirectory() as tmp:
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    spmd_procs = this_host().spawn_procs(per_host={"gpus": 3})
    spmd_actors = spmd_procs.spawn("_SPMDActor", SPMDActor)
    first_values = dict.fromkeys(spmd_procs.extent.labels, 0)
    master_addr, master_port = spmd_actors.slice(**first_values).get_host_port.call_one(None).get()
    done = spmd_actors.main.call(master_addr, master_port, [script, tmp]).get()
    assert done.values() == [True, True, True], done
    for rank in range(3):
        with open(os.path.join(tmp, f"rank{rank}.txt")) as f:
            written = f.read()
        print(written)
        assert written == f"{rank} 3 [6.0, 6.0, 6.0]", written
print("SPMDActor.main OK")
