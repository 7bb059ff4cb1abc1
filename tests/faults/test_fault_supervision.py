"""Supervision: each failure reaches the mesh's owner once; unhandled ones reach the controller."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest
from faults_actors import FailingInit, FailsFastOthersSlow, Spawner, Supervisor, Worker
from faults_support import gone

import actormesh
from actormesh import ActorInitError, ProcMesh, SupervisionError, proc_mesh
from actormesh.testing import wait_until

# How many times the death race is run in a row (each with fresh processes).
REPETITIONS = 15


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
    first = procs.spawn("first", Worker)
    procs.spawn("second", Worker)
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


def test_a_death_is_not_reported_for_a_rank_whose_init_had_failed(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    half = procs.spawn("half", FailingInit, 1)
    with pytest.raises(RuntimeError, match="rank 1 refuses to start"):
        half.initialized.get(timeout=30)
    first = procs.spawn("first", Worker)
    wait_until(lambda: len(failures) == 1, 10, "the init failure")
    pid = first.slice(gpus=1).pid.call_one().get(timeout=10)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(failures) == 2, 10, "the death")
    # 'half' had no actor on the process that died: its owner heard of rank 1 once.
    assert [(f.mesh, f.ranks, f.kind) for f in failures] == [
        ("half", (1,), "init"),
        ("first", (1,), "died"),
    ]


def test_an_owning_actor_handles_the_failures_of_its_meshes(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    owners = procs.spawn("owners", Supervisor, True)
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
    owners = procs.spawn("owners", Supervisor, False)
    owner = owners.slice(gpus=1)
    child_pids = owner.start_child.call_one(2).get(timeout=60)
    os.kill(child_pids[0], signal.SIGKILL)
    wait_until(lambda: len(failures) == 1, 5, "the escalated failure")
    failure = failures[0]
    assert (failure.mesh, failure.ranks, failure.kind) == ("owners", (1,), "unhandled")
    assert isinstance(failure.error, SupervisionError)
    assert "did not handle a failure of mesh 'child'" in str(failure.error)
    assert "killed by SIGKILL" in str(failure.error)
    # As in Monarch, an owner that did not handle its child's failure fails with it: it
    # is dropped, and calls to it fail as calls to a dead actor do.
    with pytest.raises(actormesh.ActorDiedError, match="was dropped after it failed"):
        owner.seen_failures.call_one().get(timeout=10)
    assert owners.slice(gpus=0).seen_failures.call_one().get(timeout=10) == []


def test_a_failed_broadcast_from_a_holder_of_the_mesh_goes_to_its_owner(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    owners = procs.spawn("holders", Supervisor, True)
    owner = owners.slice(gpus=0)
    owner.start_child.call_one(2).get(timeout=60)
    child = owner.child_mesh.call_one().get(timeout=30)
    child.slice(gpus=1).fail.broadcast("held, not owned")  # the controller only holds it
    wait_until(lambda: owner.seen_failures.call_one().get(timeout=10), 10, "the owner to hear")
    assert owner.seen_failures.call_one().get(timeout=10) == [
        {"mesh": "child", "ranks": [1], "kind": "broadcast"}
    ]
    assert failures == []  # handled by the owner: nothing reaches the controller


def test_an_actor_without_a_hook_escalates_too_and_is_dropped(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    workers = procs.spawn("plain", Worker)
    workers.slice(gpus=0).fail.broadcast("broadcast boom")
    wait_until(lambda: len(failures) == 1, 5, "the broadcast failure")
    assert (failures[0].mesh, failures[0].ranks, failures[0].kind) == ("plain", (0,), "broadcast")
    assert isinstance(failures[0].error, ValueError)
    assert "broadcast boom" in str(failures[0].error)
    # The controller's hook handled it, and the actor is dropped all the same (as Monarch
    # drops it): calls to it fail as calls to a dead actor do; the others answer.
    for call in (
        lambda: workers.slice(gpus=0).echo.call_one(1).get(timeout=10),
        lambda: workers.echo.call(1).get(timeout=10),
    ):
        with pytest.raises(
            actormesh.ActorDiedError, match=r"\{gpus=0\} of mesh 'plain' was dropped"
        ):
            call()
    assert workers.slice(gpus=1).echo.call_one(2).get(timeout=10) == 2
    # Its process answered the calls above for it ("dropped"): that answer does not make
    # it live again, so choose keeps to the other rank and stats say it is gone.
    assert workers.stats()[0]["alive"] is False
    assert {workers.pid.choose().get(timeout=10) for _ in range(8)} == {
        workers.slice(gpus=1).pid.call_one().get(timeout=10)
    }


def test_a_failing_init_fails_the_spawn_and_is_a_failure_of_that_rank_only(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    bad = procs.spawn("bad", FailingInit, 1)
    with pytest.raises(ActorInitError) as caught:
        bad.initialized.get(timeout=30)
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert "rank 1 refuses to start" in str(error)
    assert error.point == {"gpus": 1}
    assert "raise RuntimeError" in error.remote_traceback
    # Its owner heard of it once, as a failure of rank 1 (the spawn's error was set after).
    [failure] = failures
    assert (failure.mesh, failure.ranks, failure.kind) == ("bad", (1,), "init")
    assert failure.error is error
    for _ in range(2):  # every time: calls that include rank 1 raise its error
        with pytest.raises(ActorInitError, match="rank 1 refuses to start"):
            bad.ping.call().get(timeout=10)
        with pytest.raises(ActorInitError):
            bad.slice(gpus=1).ping.call_one().get(timeout=10)
        # A slice without it serves on, and choose never picks it.
        assert bad.slice(gpus=0).ping.call_one().get(timeout=10) == "pong"
        assert bad.ping.choose().get(timeout=10) == "pong"
    # The processes serve on: a new mesh spawns fine, and nothing more was reported.
    good = procs.spawn("good", FailingInit, 7)
    assert list(good.ping.call().get(timeout=10).values()) == ["pong", "pong"]
    assert len(failures) == 1


def test_calls_answered_by_a_rank_whose_init_failed_do_not_make_it_live_again(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    # Calls sent while the spawn gathers: rank 1's process answers them (with the init
    # error) around the time the spawn completes; choose must still never pick rank 1.
    for attempt in range(3):
        mesh = procs.spawn(f"racing{attempt}", FailsFastOthersSlow, 1)
        sent = []
        while not mesh._state.init_errors and len(sent) < 5000:
            with contextlib.suppress(ActorInitError):
                sent.append(mesh.slice(gpus=1).ping.call_one())
        for call in sent:
            with contextlib.suppress(ActorInitError):
                call.get(timeout=10)
        with pytest.raises(ActorInitError):
            mesh.initialized.get(timeout=10)
        for _ in range(4):
            assert mesh.ping.choose().get(timeout=10) == "pong"
        assert 1 in mesh._state.dead


def test_an_owner_that_handles_its_spawns_init_error_itself_is_not_dropped(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    spawner = procs.spawn("spawner", Spawner).slice(gpus=0)
    assert spawner.spawn_and_handle.call_one().get(timeout=60) == "handled RuntimeError"
    assert spawner.ping.call_one().get(timeout=10) == "pong"
    assert failures == []  # the spawner was the owner: nothing went up


def test_without_a_hook_calls_that_include_a_dead_rank_raise_and_the_others_work(
    procs: ProcMesh, capfd: pytest.CaptureFixture[str]
) -> None:
    actormesh.set_failure_hook(None)
    workers = procs.spawn("unwatched", Worker)
    pid = workers.slice(gpus=1).pid.call_one().get(timeout=10)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid), 5, "the worker to die")
    wait_until(lambda: bool(workers._state.unhandled), 5, "the failure to be recorded")
    for _ in range(2):  # every time, not once
        with pytest.raises(SupervisionError, match="unhandled failure of actor mesh 'unwatched'"):
            workers.echo.call(1)
        with pytest.raises(SupervisionError):
            workers.slice(gpus=1).echo.call_one(1)
        assert workers.slice(gpus=0).echo.call_one(1).get(timeout=10) == 1
        assert workers.echo.choose(2).get(timeout=10) == 2
    assert "unhandled failure of mesh 'unwatched'" in capfd.readouterr().err


def test_an_unhandled_broadcast_failure_drops_the_actor_and_fails_calls_to_it(
    procs: ProcMesh,
) -> None:
    actormesh.set_failure_hook(None)
    workers = procs.spawn("loud", Worker)
    workers.slice(gpus=0).fail.broadcast("broadcast boom")
    wait_until(lambda: bool(workers._state.unhandled), 5, "the failure to be recorded")
    assert workers.slice(gpus=1).echo.call_one(1).get(timeout=10) == 1  # another rank
    for value in (1, 2):  # every time: the actor was dropped, as Monarch drops it
        with pytest.raises(SupervisionError, match="broadcast boom"):
            workers.echo.call(value)


def test_a_call_to_several_failed_ranks_names_them_all(procs: ProcMesh) -> None:
    actormesh.set_failure_hook(None)
    workers = procs.spawn("both_loud", Worker)
    workers.fail.broadcast("everyone boom")
    wait_until(lambda: len(workers._state.unhandled) == 2, 5, "both failures to be recorded")
    with pytest.raises(SupervisionError, match=r"of this call failed too") as caught:
        workers.echo.call(1)
    message = str(caught.value)
    told, also = ("[0]", "[1]") if "ranks [0])" in message else ("[1]", "[0]")
    assert f"ranks {told}) (ranks {also} of this call failed too)" in message


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hook", [False, True], ids=["no hook", "hook"])
def test_the_outcome_after_a_death_is_the_same_every_time(
    hook: bool, failures: list[actormesh.Failure]
) -> None:
    # The race of issue 13: the call waiting on the dead rank fails, and the caller at
    # once calls again. Whatever the timing, survivors answer and the dead rank's calls
    # fail the same way: SupervisionError without a hook, ActorDiedError with one.
    if not hook:
        actormesh.set_failure_hook(None)
    outcomes = []
    for _ in range(REPETITIONS):
        with proc_mesh(gpus=2).get(timeout=30) as procs:
            workers = procs.spawn("race", Worker)
            waiting = workers.slice(gpus=1).die.call_one("kill")
            with pytest.raises(actormesh.ActorDiedError):
                waiting.get(timeout=30)
            survivor = workers.slice(gpus=0).echo.call_one(1).get(timeout=10)
            try:
                workers.echo.call(1).get(timeout=10)
            except (SupervisionError, actormesh.ActorDiedError) as error:
                outcomes.append((survivor, type(error).__name__))
    expected = "ActorDiedError" if hook else "SupervisionError"
    assert outcomes == [(1, expected)] * REPETITIONS


def test_an_actor_can_start_and_stop_its_own_process_meshes(procs: ProcMesh) -> None:
    owners = procs.spawn("starters", Supervisor, True)
    owner = owners.slice(gpus=0)
    pids = owner.start_child.call_one(2).get(timeout=60)
    assert owner.call_child.call_one("hi").get(timeout=10) == ["hi", "hi"]
    assert owner.stop_child.call_one().get(timeout=30) == "MeshStoppedError"
    wait_until(lambda: all(gone(pid) for pid in pids), 5, "the child processes to exit")


def test_broadcasts_that_never_ran_because_of_a_stop_are_no_failures(
    failures: list[actormesh.Failure], capfd: pytest.CaptureFixture[str]
) -> None:
    # One broadcast runs, the next waits behind it when the mesh stops: the stop was asked
    # for, so neither is reported as an unhandled failure.
    procs = proc_mesh(gpus=2).get(timeout=30)
    workers = procs.spawn("busy", Worker)
    assert workers.echo.call(1).get(timeout=10).values() == [1, 1]
    workers.sleep.broadcast(0.5)
    workers.sleep.broadcast(0.5)
    procs.stop().get(timeout=30)
    assert failures == []
    assert "unhandled failure" not in capfd.readouterr().err


def test_a_call_whose_endpoint_ends_its_actor_is_reported_as_ended(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    workers = procs.spawn("ending", Worker)
    with pytest.raises(actormesh.ActorFailedError):
        workers.slice(gpus=1).die.call_one("raise-systemexit").get(timeout=30)
    wait_until(lambda: len(failures) == 1, 10, "the failure")
    # Not a "broadcast": a call_one ended the actor (SystemExit ends it, as in Monarch).
    assert (failures[0].mesh, failures[0].ranks, failures[0].kind) == ("ending", (1,), "ended")
