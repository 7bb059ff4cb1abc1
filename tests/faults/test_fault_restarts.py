"""Restarts: a dead rank comes back with its coordinates, its arguments and its address."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_actors import Counter, FailingInit, Relay, RestartRefuser
from faults_support import gone

import actormesh
from actormesh import ActorDiedError, ActorInitError, ActorMesh, ProcMesh, proc_mesh
from actormesh.testing import wait_until


@pytest.fixture
def procs() -> Iterator[ProcMesh]:
    mesh = proc_mesh(gpus=2, restart="rank", max_restarts=2, restart_window=60).get(timeout=30)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def kill_rank(mesh: ActorMesh[Counter], rank: int) -> int:
    """SIGKILL a rank's process and wait until the owner has noticed."""
    one = mesh.slice(gpus=rank)
    pid = int(one.pid.call_one().get(timeout=10))
    probe = one.sleep.call_one(30)  # in flight at the death: fails once it is noticed
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ActorDiedError):
        probe.get(timeout=10)
    return pid


def test_a_restarted_rank_runs_init_again_with_the_same_arguments_and_restores(
    procs: ProcMesh, tmp_path: Path, failures: list[actormesh.Failure]
) -> None:
    mesh = procs.spawn("counters", Counter, 10, str(tmp_path))
    assert list(mesh.incr.call().get(timeout=10).values()) == [11, 11]
    old = kill_rank(mesh, 1)
    state = mesh.slice(gpus=1).state.call_one().get(timeout=30)  # waits for the restart
    assert state["pid"] != old
    assert state["start"] == 10 and state["value"] == 10  # a fresh actor, same arguments
    assert state["restored"] is True
    assert state["point"] == {"gpus": 1}
    assert (tmp_path / "init-1").read_text() == "xx"  # __init__ ran twice at rank 1
    assert (tmp_path / "init-0").read_text() == "x"  # and once at rank 0
    assert mesh.slice(gpus=0).state.call_one().get(timeout=10)["value"] == 11
    assert failures == []  # within budget: the owner is not bothered


def test_calls_in_flight_fail_unless_idempotent_and_later_calls_wait_in_order(
    procs: ProcMesh, tmp_path: Path
) -> None:
    mesh = procs.spawn("counters", Counter, 0, str(tmp_path))
    one = mesh.slice(gpus=1)
    old = int(one.pid.call_one().get(timeout=10))
    in_flight = one.sleep.call_one(10)
    idempotent = one.slow_idempotent.call_one(0.2)  # queued behind it, in flight too
    os.kill(old, signal.SIGKILL)
    with pytest.raises(ActorDiedError, match="restarting the rank"):
        in_flight.get(timeout=10)
    during = [one.incr.call_one() for _ in range(5)]
    assert [f.get(timeout=30) for f in during] == [1, 2, 3, 4, 5]
    assert idempotent.get(timeout=30) not in (old, None)  # ran again, in the new process


def test_handles_held_elsewhere_reach_the_restarted_rank(procs: ProcMesh, tmp_path: Path) -> None:
    mesh = procs.spawn("counters", Counter, 0, str(tmp_path))
    relay = procs.spawn("relay", Relay).slice(gpus=0)
    before = relay.pids.call_one(mesh).get(timeout=10)
    kill_rank(mesh, 1)
    wait_until(lambda: gone(before[1]), 5, "the old process to die")
    mesh.slice(gpus=1).pid.call_one().get(timeout=30)  # the restart is over
    after = relay.pids.call_one(mesh).get(timeout=10)
    assert after[0] == before[0] and after[1] != before[1]


def test_a_death_beyond_the_budget_reaches_the_owner(
    procs: ProcMesh, tmp_path: Path, failures: list[actormesh.Failure]
) -> None:
    mesh = procs.spawn("counters", Counter, 0, str(tmp_path))
    for _ in range(2):
        kill_rank(mesh, 0)
        mesh.slice(gpus=0).pid.call_one().get(timeout=30)
    assert failures == []
    kill_rank(mesh, 0)
    wait_until(lambda: len(failures) == 1, 10, "the owner to hear")
    assert (failures[0].mesh, failures[0].ranks, failures[0].kind) == ("counters", (0,), "died")
    assert "restart budget is spent (2 restarts within 60 s" in str(failures[0].error)
    with pytest.raises(ActorDiedError):
        mesh.slice(gpus=0).pid.call_one().get(timeout=10)
    assert mesh.slice(gpus=1).incr.call_one().get(timeout=10) == 1


def test_a_restart_whose_init_fails_is_reported_and_the_rank_stays_dead(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    mesh = procs.spawn("refusers", RestartRefuser)
    pid = mesh.slice(gpus=1).pid.call_one().get(timeout=10)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(failures) == 1, 15, "the failed restart to be reported")
    failure = failures[0]
    assert (failure.mesh, failure.ranks, failure.kind) == ("refusers", (1,), "restart_failed")
    assert "no second life" in str(failure.error)
    assert mesh.slice(gpus=0).pid.call_one().get(timeout=10) != pid
    # Rank 1 stays dead: a call to it fails at once with its __init__'s error (as after
    # any failing __init__), every time, and it is not restarted again (which would
    # report another failure, and make the call wait for the restart).
    for _ in range(2):
        with pytest.raises(ActorInitError, match="no second life"):
            mesh.slice(gpus=1).pid.call_one().get(timeout=10)
    with pytest.raises(ActorInitError, match="no second life"):
        mesh.pid.call().get(timeout=10)
    assert len(failures) == 1, failures


def test_a_restart_does_not_rebuild_a_rank_whose_init_failed_nor_fail_the_others(
    procs: ProcMesh, tmp_path: Path, failures: list[actormesh.Failure]
) -> None:
    healthy = procs.spawn("healthy", Counter, 0, str(tmp_path))
    broken = procs.spawn("broken_at_1", FailingInit, 1)
    with pytest.raises(ActorInitError):
        broken.initialized.get(timeout=30)
    assert [(f.mesh, f.kind) for f in failures] == [("broken_at_1", "init")]
    old = kill_rank(healthy, 1)
    state = healthy.slice(gpus=1).state.call_one().get(timeout=30)  # waits for the restart
    assert state["pid"] != old
    assert [(f.mesh, f.kind) for f in failures] == [("broken_at_1", "init")]  # no more
    assert healthy._state.dead == {}
    with pytest.raises(ActorInitError):
        broken.slice(gpus=1).ping.call_one().get(timeout=10)
    assert broken.slice(gpus=0).ping.call_one().get(timeout=10) == "pong"
