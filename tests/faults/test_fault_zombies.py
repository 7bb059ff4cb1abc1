"""No zombies: workers reap the orphans they adopt, and never a child their actors wait for."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest
from faults_actors import Worker
from faults_support import gone, stat_fields, state_of

from actormesh import ActorMesh, ProcMesh, proc_mesh
from actormesh.testing import wait_until


def parent_of(pid: int) -> int:
    """The parent's pid of ``pid`` (read from ``/proc/<pid>/stat``); 0 once it is gone."""
    fields = stat_fields(pid)
    return int(fields[1]) if fields else 0


def session_of(pid: int) -> int:
    """The session id of ``pid``; 0 once it is gone."""
    fields = stat_fields(pid)
    return int(fields[3]) if fields else 0


@pytest.fixture
def worker() -> Iterator[ActorMesh[Worker]]:
    procs: ProcMesh = proc_mesh(gpus=1).get(timeout=30)
    try:
        yield procs.spawn("parent", Worker)
    finally:
        procs.stop().get(timeout=30)


def test_an_adopted_daemon_that_exits_is_reaped_by_the_worker_while_it_lives(
    worker: ActorMesh[Worker],
) -> None:
    me = worker.pid.call_one().get(timeout=10)
    daemon = worker.start_sleeper.call_one(detached=True).get(timeout=10)
    # Its shell parent exited (and was collected) before the call returned: the worker, a
    # subreaper, adopted the daemon; without that, pid 1 would have.
    assert parent_of(daemon) == me, f"daemon {daemon} adopted by {parent_of(daemon)}, not {me}"
    # Killed only once it runs in its own session (setsid done): that is how the reaper
    # tells an adopted daemon from the actor's own child. (One killed before, born and
    # orphaned within one look of the reaper, may stay a zombie until the worker exits.)
    wait_until(lambda: session_of(daemon) == daemon, 5, "the daemon to start its session")
    os.kill(daemon, signal.SIGKILL)
    # Dead, it is a zombie of the worker's until the worker's reaper (every second)
    # collects it: only its parent can, and the worker lives on.
    wait_until(lambda: state_of(daemon) is None, 5, "the adopted daemon to be reaped")
    assert worker.echo.call_one("alive").get(timeout=10) == "alive"
    assert worker.pid.call_one().get(timeout=10) == me


def test_the_reaper_leaves_the_actors_own_children_alone(worker: ActorMesh[Worker]) -> None:
    # The child exits at once, but its parent collects it only 2.5 s later: two reaper
    # rounds in between must not steal its exit status.
    assert worker.own_child_exit_code.call_one(7, 2.5).get(timeout=30) == 7


def test_gone_treats_a_zombie_as_exited() -> None:
    assert gone(2**22 + 1)  # no such process (above any pid_max)
    # A real zombie: a child of ours that exited and that we have not reaped yet.
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert not gone(child.pid) and state_of(child.pid) in ("R", "S")
        assert parent_of(child.pid) == os.getpid()
        assert child.stdin is not None
        child.stdin.close()  # cat reads EOF and exits; nobody waits for it yet
        wait_until(lambda: state_of(child.pid) == "Z", 10, "the child to become a zombie")
        assert gone(child.pid)
        assert parent_of(child.pid) == os.getpid()  # still ours to reap, not pid 1's
    finally:
        child.kill()
        assert child.wait(timeout=10) == 0
    assert state_of(child.pid) is None  # reaped: gone from the process table
