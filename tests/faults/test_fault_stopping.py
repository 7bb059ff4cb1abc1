"""Stopping always finishes: under load, with dead ranks, twice, escalating to SIGKILL."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from faults_actors import Worker
from faults_support import gone, run_program

import actormesh
from actormesh import ActorDiedError, MeshStoppedError, proc_mesh
from actormesh.testing import wait_until


def test_stop_under_load_fails_the_pending_calls_with_mesh_stopped() -> None:
    procs = proc_mesh(gpus=2).get(timeout=30)
    mesh = procs.spawn("busy", Worker)
    # Calls that would run for an hour: stop() does not wait for them.
    pending = [mesh.sleep.call(3600) for _ in range(3)] + [mesh.asleep.call(3600)]
    outcomes: list[BaseException | None] = []
    stop_callers = threading.Event()

    def hammer() -> None:
        # Calls keep coming while the mesh stops: each ends with a value or an error.
        while not stop_callers.is_set():
            try:
                mesh.echo.call(1).get(timeout=10)
            except (MeshStoppedError, ActorDiedError) as error:
                outcomes.append(error)
                return

    callers = [threading.Thread(target=hammer) for _ in range(3)]
    for caller in callers:
        caller.start()
    procs.stop().get(timeout=30)
    for future in pending:
        with pytest.raises(MeshStoppedError):
            future.get(timeout=5)
    stop_callers.set()
    for caller in callers:
        caller.join(timeout=10)
        assert not caller.is_alive()
    assert all(isinstance(e, MeshStoppedError) for e in outcomes)


def test_stop_with_dead_ranks_and_twice_finishes(failures: list[actormesh.Failure]) -> None:
    procs = proc_mesh(gpus=3).get(timeout=30)
    mesh = procs.spawn("partly", Worker)
    pids = list(mesh.pid.call().get(timeout=10).values())
    os.kill(pids[0], signal.SIGKILL)
    os.kill(pids[2], signal.SIGKILL)
    wait_until(lambda: gone(pids[0]) and gone(pids[2]), 5, "the workers to die")
    procs.stop().get(timeout=30)
    procs.stop().get(timeout=30)  # a second stop is a no-op, not an error
    assert gone(pids[1])


def test_any_use_after_stop_raises_mesh_stopped() -> None:
    procs = proc_mesh(gpus=2).get(timeout=30)
    mesh = procs.spawn("done", Worker)
    other = procs.spawn("other", Worker)
    other.stop().get(timeout=10)  # an actor mesh alone: its processes stay up
    with pytest.raises(MeshStoppedError):
        other.echo.call(1)
    assert list(mesh.echo.call(1).get(timeout=10).values()) == [1, 1]
    procs.stop().get(timeout=30)
    for use in (
        lambda: mesh.echo.call(1),
        lambda: mesh.slice(gpus=0).echo.call_one(1),
        lambda: mesh.echo.broadcast(1),
        lambda: mesh.echo.choose(1),
        lambda: mesh.echo.stream(1),
        lambda: procs.spawn("again", Worker),
        lambda: procs.slice(gpus=1).spawn("again", Worker),
    ):
        with pytest.raises(MeshStoppedError):
            use()


def test_stop_escalates_from_sigterm_to_sigkill_after_the_grace() -> None:
    result = run_program("stop_escalation", env={"ACTORMESH_STOP_GRACE": "0.5"})
    # The worker's GIL is held for an hour: it ignores SHUTDOWN and SIGTERM. stop()
    # gave it the grace (0.5 s) and then 1 s after SIGTERM (at least that long: a busy
    # machine makes it longer, never shorter), then killed it (the program's stop has a
    # 30 s limit: it did not wait for the hour).
    assert result["took"] >= 1.5
    assert result["codes"][1] == -signal.SIGKILL
    assert result["codes"][0] == 0  # the other worker left when asked
    assert result["pending"].startswith("MeshStoppedError")


@pytest.mark.timeout(60)
def test_stopping_an_actor_mesh_fails_the_call_its_def_endpoint_is_running(
    tmp_path: Path,
) -> None:
    procs = proc_mesh(gpus=1).get(timeout=30)
    try:
        mesh = procs.spawn("busy", Worker)
        marker = tmp_path / "running"
        running = mesh.sleep.call_one(3600, str(marker))  # a thread cannot be interrupted
        queued = mesh.echo.call_one(1)
        wait_until(marker.exists, 30, "the endpoint to start")
        mesh.stop().get(timeout=30)
        # Both callers hear of the stop by the time stop() returns, not in an hour.
        for future in (queued, running):
            with pytest.raises(MeshStoppedError, match="stopped"):
                future.get(timeout=5)
    finally:
        procs.stop().get(timeout=30)
