"""No zombies: workers reap the orphans they adopt, and never a child their actors wait for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from faults_actors import Worker
from faults_support import gone, state_of

from actormesh import ActorMesh, ProcMesh, proc_mesh
from actormesh.testing import wait_until


@pytest.fixture
def worker() -> Iterator[ActorMesh[Worker]]:
    procs: ProcMesh = proc_mesh(gpus=1).get(timeout=30)
    try:
        yield procs.spawn("parent", Worker)
    finally:
        procs.stop().get(timeout=30)


def test_an_adopted_daemon_that_exits_is_reaped_while_the_worker_lives(
    worker: ActorMesh[Worker],
) -> None:
    daemon = worker.start_short_daemon.call_one(0.3).get(timeout=10)
    # Its shell parent exited at once: the worker (a subreaper) adopted it. It exits after
    # 0.3 s, and the worker's reaper (every second) collects it.
    wait_until(lambda: state_of(daemon) is None, 5, "the adopted daemon to be reaped")
    assert worker.echo.call_one("alive").get(timeout=10) == "alive"


def test_the_reaper_leaves_the_actors_own_children_alone(worker: ActorMesh[Worker]) -> None:
    # The child exits at once, but its parent collects it only 2.5 s later: two reaper
    # rounds in between must not steal its exit status.
    assert worker.own_child_exit_code.call_one(7, 2.5).get(timeout=30) == 7


def test_gone_treats_a_zombie_as_exited() -> None:
    assert gone(2**22 + 1)  # no such process
