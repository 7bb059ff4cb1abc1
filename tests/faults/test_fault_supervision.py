"""Supervision: each failure reaches the mesh's owner once; unhandled ones reach the controller."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from faults_actors import FailingInit, Supervisor, Worker
from faults_support import gone, wait_until

import actormesh
from actormesh import ActorInitError, ProcMesh, SupervisionError, proc_mesh


@pytest.fixture
def procs() -> Iterator[ProcMesh]:
    mesh = proc_mesh(gpus=2).get(timeout=30)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def test_the_controller_hears_of_a_death_once_per_mesh(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    first = procs.spawn("first", Worker).get(timeout=30)
    procs.spawn("second", Worker).get(timeout=30)
    pid = first.slice(gpus=1).pid.call_one().get(timeout=10)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(failures) == 2, 5, "both meshes' failures")
    assert sorted((f.mesh, f.ranks, f.kind) for f in failures) == [
        ("first", (1,), "died"),
        ("second", (1,), "died"),
    ]
    assert all("killed by SIGKILL" in str(f.error) for f in failures)
    first.slice(gpus=0).echo.call_one(1).get(timeout=10)
    assert len(failures) == 2  # never reported again


def test_an_owning_actor_handles_the_failures_of_its_meshes(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    owners = procs.spawn("owners", Supervisor, True).get(timeout=30)
    owner = owners.slice(gpus=0)
    child_pids = owner.start_child.call_one(2).get(timeout=60)
    os.kill(child_pids[1], signal.SIGKILL)
    wait_until(lambda: owner.seen_failures.call_one().get(timeout=10), 5, "__supervise__")
    assert owner.seen_failures.call_one().get(timeout=10) == [
        {"mesh": "child", "ranks": [1], "kind": "died"}
    ]
    assert failures == []  # handled: the controller never hears of it


def test_an_unhandled_failure_escalates_to_the_controller(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    owners = procs.spawn("owners", Supervisor, False).get(timeout=30)
    owner = owners.slice(gpus=1)
    child_pids = owner.start_child.call_one(2).get(timeout=60)
    os.kill(child_pids[0], signal.SIGKILL)
    wait_until(lambda: len(failures) == 1, 5, "the escalated failure")
    failure = failures[0]
    assert (failure.mesh, failure.ranks, failure.kind) == ("owners", (1,), "unhandled")
    assert isinstance(failure.error, SupervisionError)
    assert "did not handle a failure of mesh 'child'" in str(failure.error)
    assert "killed by SIGKILL" in str(failure.error)
    assert owner.seen_failures.call_one().get(timeout=10) == [
        {"mesh": "child", "ranks": [0], "kind": "died"}
    ]


def test_an_actor_without_a_hook_escalates_too(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    workers = procs.spawn("plain", Worker).get(timeout=30)
    workers.slice(gpus=0).fail.broadcast("broadcast boom")
    wait_until(lambda: len(failures) == 1, 5, "the broadcast failure")
    assert (failures[0].mesh, failures[0].ranks, failures[0].kind) == ("plain", (0,), "broadcast")
    assert isinstance(failures[0].error, ValueError)
    assert "broadcast boom" in str(failures[0].error)


def test_a_failing_init_fails_the_spawn_with_the_remote_traceback(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    with pytest.raises(ActorInitError) as caught:
        procs.spawn("bad", FailingInit, 1).get(timeout=30)
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert "rank 1 refuses to start" in str(error)
    assert error.point == {"gpus": 1}
    assert "raise RuntimeError" in error.remote_traceback
    # The processes serve on: a new mesh spawns fine, and no failure was reported twice.
    good = procs.spawn("good", FailingInit, 7).get(timeout=30)
    assert list(good.ping.call().get(timeout=10).values()) == ["pong", "pong"]
    assert failures == []


def test_without_a_hook_the_next_use_of_the_failed_mesh_raises(
    procs: ProcMesh, capfd: pytest.CaptureFixture[str]
) -> None:
    actormesh.set_failure_hook(None)
    workers = procs.spawn("unwatched", Worker).get(timeout=30)
    pid = workers.slice(gpus=1).pid.call_one().get(timeout=10)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid), 5, "the worker to die")
    wait_until(lambda: bool(workers._state.unhandled), 5, "the failure to be recorded")
    with pytest.raises(SupervisionError, match="unhandled failure of actor mesh 'unwatched'"):
        workers.slice(gpus=0).echo.call_one(1)
    assert workers.slice(gpus=0).echo.call_one(1).get(timeout=10) == 1  # raised once
    assert "unhandled failure of mesh 'unwatched'" in capfd.readouterr().err


def test_an_actor_can_start_and_stop_its_own_process_meshes(procs: ProcMesh) -> None:
    owners = procs.spawn("starters", Supervisor, True).get(timeout=30)
    owner = owners.slice(gpus=0)
    pids = owner.start_child.call_one(2).get(timeout=60)
    assert owner.call_child.call_one("hi").get(timeout=10) == ["hi", "hi"]
    assert owner.stop_child.call_one().get(timeout=30) == "MeshStoppedError"
    wait_until(lambda: all(gone(pid) for pid in pids), 5, "the child processes to exit")
