"""``exec_command`` on a job's hosts: each rank runs the command with its place in the
mesh in its environment; the future gives the largest exit status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actormesh.actor import HostMesh
from actormesh.job import ProcessJob, exec_command


@pytest.fixture(scope="module")
def hosts() -> Iterator[HostMesh]:
    job = ProcessJob({"hosts": 2})
    try:
        yield job.state(cached_path=None).hosts
    finally:
        job.kill()


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_every_rank_runs_the_command_and_the_worst_status_wins(
    hosts: HostMesh, tmp_path: Path
) -> None:
    script = 'echo "rank $MONARCH_RANK_hosts of $MONARCH_SIZE_hosts"; exit $MONARCH_RANK_hosts'
    out = str(tmp_path / "$SUBDIR")
    status = exec_command(hosts, ["sh", "-c", script], output_dir=out).get(timeout=120)
    assert status == 1
    for rank in (0, 1):
        written = (tmp_path / f"hosts_{rank}" / "stdout.txt").read_text()
        assert written == f"rank {rank} of 2\n"


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_one_rank_by_rank_or_point_with_extra_environment(
    hosts: HostMesh, capfd: pytest.CaptureFixture[str]
) -> None:
    script = 'echo "$GREETING from $MONARCH_RANK_hosts"'
    env = {"GREETING": "hello"}
    assert exec_command(hosts, ["sh", "-c", script], env=env, rank=1).get(timeout=120) == 0
    # One host ran it; sliced to one point, its mesh has no dimensions left to name.
    assert capfd.readouterr().out.count("hello from") == 1
    assert exec_command(hosts, ["sh", "-c", "exit 0"], point={"hosts": 0}).get(timeout=120) == 0
    with pytest.raises(ValueError, match="not both"):
        exec_command(hosts, ["true"], rank=0, point={"hosts": 0})
    with pytest.raises(ValueError, match="non-empty"):
        exec_command(hosts, "true")
