"""Supervision: a process that dies, ``MeshFailure``, ``unhandled_fault_hook`` and
``__supervise__``, as in Monarch 0.7.

Monarch reports failures of its own system meshes too (a ``logger-...`` mesh per process
mesh), so the tests look only at the failures of the meshes they spawned.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import actormesh.actor
from actormesh import ActorDiedError, ActorFailedError, SupervisionError
from actormesh.actor import ActorError, MeshFailure, ProcMesh, this_host, unhandled_fault_hook
from actormesh.testing import wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import (
        BackloggedOwner,
        DiesOfABaseException,
        Echo,
        EndsItself,
        Nests,
        Parent,
        Victim,
        WaitsForItsSupervisor,
    )
else:
    from monarch_actors import (
        BackloggedOwner,
        DiesOfABaseException,
        Echo,
        EndsItself,
        Nests,
        Parent,
        Victim,
        WaitsForItsSupervisor,
    )


@dataclass
class Crash:
    """Rank 1 of a ``{gpus: 3}`` mesh of ``Victim`` exited with code 7 during a call."""

    procs: ProcMesh
    victims: Victim
    pids: list[int]
    error: BaseException
    failures: list[MeshFailure]

    def victim_failures(self) -> list[MeshFailure]:
        return [f for f in self.failures if f.mesh_name.startswith("victim")]


@pytest.fixture(scope="module")
def crash() -> Iterator[Crash]:
    failures: list[MeshFailure] = []
    previous = actormesh.actor.unhandled_fault_hook
    actormesh.actor.unhandled_fault_hook = failures.append  # type: ignore[assignment]
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    try:
        victims = procs.spawn("victim", Victim)
        pids = victims.pid.call().get(timeout=30).values()
        try:
            victims.slice(gpus=1).die.call_one(7).get(timeout=60)
        except Exception as error:
            raised: BaseException = error
        else:
            raise AssertionError("the call to an actor whose process exited returned")
        crashed = Crash(procs, victims, pids, raised, failures)
        wait_until(lambda: bool(crashed.victim_failures()), 60, "the fault hook")
        yield crashed
    finally:
        actormesh.actor.unhandled_fault_hook = previous
        procs.stop().get(timeout=30)


def test_a_call_whose_actor_process_dies_raises(crash: Crash) -> None:
    assert isinstance(crash.error, Exception)
    assert not isinstance(crash.error, ActorError)  # not an error the endpoint raised


def test_the_error_of_a_dead_actor_is_a_runtime_error(crash: Crash) -> None:
    assert isinstance(crash.error, RuntimeError)


def test_the_fault_hook_gets_a_mesh_failure_of_the_dead_rank(crash: Crash) -> None:
    [failure] = crash.victim_failures()
    assert isinstance(failure, MeshFailure)
    assert "code 7" in failure.report()
    # Monarch's MeshFailure says which ranks crashed in its text only (no attribute).
    assert "crashed_ranks=[1]" in str(failure)


def test_calls_that_include_the_dead_rank_keep_failing(crash: Crash) -> None:
    # The fault hook handled the death, so the rank is dead: ActorDiedError at once (an
    # unhandled one raises actormesh's SupervisionError; Monarch's is not exported).
    dead = r"actor \{gpus=1\} of mesh 'victim' died .*exited with code 7"
    for _ in range(2):
        with pytest.raises(ActorDiedError, match=dead):
            crash.victims.pid.call().get(timeout=30)
        with pytest.raises(ActorDiedError, match=dead):
            crash.victims.slice(gpus=1).pid.call_one().get(timeout=30)


def test_slices_without_the_dead_rank_keep_working(crash: Crash) -> None:
    for _ in range(2):
        assert crash.victims.slice(gpus=0).pid.call_one().get(timeout=30) == crash.pids[0]
        assert crash.victims.slice(gpus=2).pid.call().get(timeout=30).values() == [crash.pids[2]]
        both = crash.victims.slice(gpus=slice(0, 3, 2)).pid.call().get(timeout=30)
        assert both.values() == [crash.pids[0], crash.pids[2]]


def test_a_live_slice_of_the_damaged_proc_mesh_spawns_new_actors(crash: Crash) -> None:
    fresh = crash.procs.slice(gpus=0).spawn("fresh", Victim)
    assert fresh.pid.call_one().get(timeout=30) == crash.pids[0]


@contextlib.contextmanager
def _parent(handles: bool) -> Iterator[Parent]:
    """A ``Parent`` in a process of its own, with its two child processes stopped after."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        parent = procs.spawn("parent", Parent, handles)
        try:
            yield parent
        finally:
            # A parent that did not handle its kids' failure was dropped (in Monarch, a
            # failed parent stopped them): its process ends its kids when it stops.
            with contextlib.suppress(ActorDiedError):
                parent.stop_kids.call_one().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)


def _kill_kid(parent: Parent) -> list[int]:
    """Kills the parent's kid of rank 1 (exit code 3) in a call the parent makes to it.

    The parent's call to its dying kid fails with ``ActorDiedError`` (whose name
    ``kill_kid`` returns) before ``__supervise__`` runs: it runs in order with the parent's
    messages, after ``kill_kid``. (Monarch may fail the ``kill_kid`` call itself when the
    failure is not handled.)
    """
    pids: list[int] = parent.kid_pids.call_one().get(timeout=30)
    assert parent.kill_kid.call_one(1, 3).get(timeout=60) == "ActorDiedError"
    return pids


def _kid_failures(parent: Parent) -> list[dict[str, Any]]:
    seen = parent.seen.call_one().get(timeout=30)
    return [f for f in seen if f["mesh_name"].startswith("kids")]


@pytest.mark.timeout(90)
def test_supervise_on_the_owner_gets_the_failure_of_its_child(
    fault_hook: list[MeshFailure],
) -> None:
    with _parent(handles=True) as parent:
        pids = _kill_kid(parent)
        wait_until(lambda: bool(_kid_failures(parent)), 60, "__supervise__")
        [failure] = _kid_failures(parent)
        assert failure["is_mesh_failure"]
        assert "crashed_ranks=[1]" in failure["text"]
        assert "code 3" in failure["report"]
        # Handled: the owner and the surviving child live on, the client hears nothing.
        assert parent.kid_pid.call_one(0).get(timeout=30) == pids[0]
        assert not [f for f in fault_hook if f.mesh_name.startswith(("parent", "kids"))]


@pytest.mark.timeout(90)
def test_a_failure_the_owner_does_not_handle_reaches_the_fault_hook(
    fault_hook: list[MeshFailure],
) -> None:
    def parent_failures() -> list[MeshFailure]:
        return [f for f in fault_hook if f.mesh_name.startswith("parent")]

    with _parent(handles=False) as parent:
        _kill_kid(parent)
        wait_until(lambda: bool(parent_failures()), 60, "the fault hook")
        assert all(isinstance(f, MeshFailure) for f in parent_failures())


@pytest.mark.timeout(90)
def test_an_owner_that_does_not_handle_a_failure_fails(fault_hook: list[MeshFailure]) -> None:
    with _parent(handles=False) as parent:
        _kill_kid(parent)
        wait_until(
            lambda: any(f.mesh_name.startswith("parent") for f in fault_hook), 60, "the fault hook"
        )
        # Dropped, as Monarch stops it (there with its own SupervisionError, not exported).
        with pytest.raises(
            ActorDiedError,
            match=r"mesh 'parent' was dropped after it failed: SupervisionError: did not "
            r"handle a failure of mesh 'kids'",
        ):
            parent.kid_pid.call_one(0).get(timeout=30)


@pytest.fixture
def single() -> Iterator[ProcMesh]:
    """A process of its own: Monarch spawns no more actors on a mesh that had a failure."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        yield procs
    finally:
        procs.stop().get(timeout=30)


def _broadcast_failure(procs: ProcMesh, fault_hook: list[MeshFailure], name: str) -> Echo:
    echo = procs.spawn(name, Echo)
    assert echo.ping.call_one().get(timeout=30) == "pong"
    echo.fail.broadcast("raised in broadcast")
    wait_until(lambda: any(f.mesh_name.startswith(name) for f in fault_hook), 60, "the fault hook")
    return echo


@pytest.mark.timeout(90)
def test_an_error_raised_in_a_broadcast_reaches_the_fault_hook(
    single: ProcMesh, fault_hook: list[MeshFailure]
) -> None:
    _broadcast_failure(single, fault_hook, "broadcaster")
    [failure] = [f for f in fault_hook if f.mesh_name.startswith("broadcaster")]
    assert isinstance(failure, MeshFailure)
    assert "raised in broadcast" in failure.report()


@pytest.mark.timeout(90)
def test_an_actor_whose_broadcast_raised_is_stopped(
    single: ProcMesh, fault_hook: list[MeshFailure]
) -> None:
    echo = _broadcast_failure(single, fault_hook, "broken")
    for _ in range(2):
        # Dropped, as Monarch stops it (there with its own SupervisionError, not exported).
        with pytest.raises(
            ActorDiedError,
            match=r"mesh 'broken' was dropped after it failed: ValueError: raised in broadcast",
        ):
            echo.ping.call_one().get(timeout=30)


@pytest.mark.timeout(90)
def test_a_hook_may_pass_the_failure_on_to_the_default_hook(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # actormesh's default (not Monarch's, which exits): the failure is written to stderr
    # once and stays unhandled, so calls that include the dead rank raise.
    seen: list[MeshFailure] = []

    def hook(failure: MeshFailure) -> None:
        seen.append(failure)
        unhandled_fault_hook(failure)

    previous = actormesh.actor.unhandled_fault_hook
    actormesh.actor.unhandled_fault_hook = hook
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        victims = procs.spawn("passed_on", Victim)
        with pytest.raises(ActorDiedError, match="exited with code 5"):
            victims.slice(gpus=1).die.call_one(5).get(timeout=60)
        wait_until(lambda: bool(seen), 60, "the fault hook")
        for _ in range(2):
            with pytest.raises(SupervisionError, match=r"mesh 'passed_on'.*exited with code 5"):
                victims.pid.call().get(timeout=30)
        assert victims.slice(gpus=0).pid.call_one().get(timeout=30) > 0
    finally:
        actormesh.actor.unhandled_fault_hook = previous
        procs.stop().get(timeout=30)
    assert [f.mesh_name for f in seen] == ["passed_on"]
    reports = capfd.readouterr().err.count("actormesh: unhandled failure of mesh 'passed_on'")
    assert reports == 1


def test_the_default_hook_called_by_hand_writes_the_report(
    capfd: pytest.CaptureFixture[str],
) -> None:
    failure = MeshFailure("trainers", (1, 3), "died", RuntimeError("exited with code 9"))
    unhandled_fault_hook(failure)
    assert capfd.readouterr().err == (
        "actormesh: unhandled failure of mesh 'trainers' (ranks [1, 3], died): exited with code 9\n"
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.timeout(60)
def test_a_supervision_event_runs_before_the_messages_queued_on_a_sync_actor(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        owner = procs.spawn("backlogged", BackloggedOwner, str(log))
        owner.block.broadcast(2.0)
        for i in range(3):
            owner.record.broadcast(i)
        wait_until(lambda: "record-2" in _lines(log), 30, "the backlog to run")
        assert _lines(log) == [
            "block-start",
            "block-end",
            "__supervise__",
            "record-0",
            "record-1",
            "record-2",
        ]
    finally:
        procs.stop().get(timeout=30)


def test_supervise_runs_while_an_async_endpoint_of_the_owner_waits_for_it(
    procs: ProcMesh,
) -> None:
    owner = procs.spawn("waits_for_supervisor", WaitsForItsSupervisor).slice(nodes=0, gpus=0)
    failures = owner.fail_child_and_wait.call_one().get(timeout=60)
    assert len(failures) == 1
    assert "failing_child" in failures[0] and "child failure" in failures[0]


@pytest.mark.timeout(60)
def test_a_base_exception_ends_the_actor_before_its_next_message(
    tmp_path: Path, fault_hook: list[MeshFailure]
) -> None:
    log = tmp_path / "log"
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        actor = procs.spawn("dies", DiesOfABaseException, str(log))
        actor.die.broadcast()
        actor.after.broadcast()
        wait_until(lambda: "__cleanup__" in _lines(log), 30, "the actor's cleanup")
        assert _lines(log) == ["die", "__cleanup__"]
        with pytest.raises(ActorDiedError):
            actor.after.call_one().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("fail_nested", "actor explicitly aborted due to: .*nested failure"),
        ("kill_nested", r"the process this actor was running on failed: Killed\(sig=9\)"),
    ],
)
def test_a_failure_passed_up_names_the_actor_that_failed_first(
    fault_hook: list[MeshFailure], how: str, why: str
) -> None:
    # As Monarch's report: the deepest failed actor, with its creators, and why.
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        top = procs.spawn("top", Nests)
        getattr(top, how).call_one().get(timeout=60)
        wait_until(lambda: any(f.mesh_name == "top" for f in fault_hook), 60, "the report")
    finally:
        procs.stop().get(timeout=30)
    report = next(f for f in fault_hook if f.mesh_name == "top").report()
    nested = (
        "<root>.<monarch_actors.Nests top{'gpus': 0/1}>"
        ".<monarch_actors.RunsWhatItIsGiven nested{'a_dim': 0/1}>"
    )
    assert report.startswith(f"The actor {nested} and all its descendants have failed:\n"), report
    assert re.search(why, report, re.DOTALL), report


@pytest.fixture
def ends_itself() -> Iterator[tuple[EndsItself, list[MeshFailure]]]:
    failures: list[MeshFailure] = []
    previous = actormesh.actor.unhandled_fault_hook
    actormesh.actor.unhandled_fault_hook = failures.append  # type: ignore[assignment]
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        yield procs.spawn("ender", EndsItself), failures
    finally:
        actormesh.actor.unhandled_fault_hook = previous
        procs.stop().get(timeout=30)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("how", "cause"),
    [
        ("fatal", "_Fatal"),
        ("raises_past_its_port", "ValueError: raised instead of sent"),
        ("abort", "no reason provided"),
    ],
)
def test_an_endpoint_that_ends_its_actor_fails_its_call_with_a_supervision_error(
    ends_itself: tuple[EndsItself, list[MeshFailure]], how: str, cause: str
) -> None:
    # As Monarch: the call itself raises SupervisionError ("The actor ... and all its
    # descendants have failed"), here also an ActorError with the cause; the actor is
    # dropped, its spawner's hook hears of it, and later calls fail as to a dead actor.
    actor, failures = ends_itself
    with pytest.raises(ActorFailedError) as raised:
        getattr(actor, how).call_one().get(timeout=30)
    error = raised.value
    assert isinstance(error, SupervisionError) and isinstance(error, ActorError)
    assert re.search(r"^Endpoint call ender\.\w+\(\) failed, The actor ender\{gpus=0\} and "
                     "all its descendants have failed: ", str(error)), str(error)  # fmt: skip
    assert cause in str(error)
    wait_until(lambda: any(f.mesh_name == "ender" for f in failures), 30, "the fault hook")
    report = next(f for f in failures if f.mesh_name == "ender").report()
    assert "EndsItself ender" in report and cause.split(":")[0] in report, report
    with pytest.raises(ActorDiedError, match=r"The actor ender\{gpus=0\} and all its descend"):
        actor.ping.call_one().get(timeout=30)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["fatal", "raises_past_its_port", "abort"])
def test_a_call_queued_behind_the_endpoint_that_ends_its_actor_fails_as_later_calls_do(
    ends_itself: tuple[EndsItself, list[MeshFailure]], how: str
) -> None:
    # The ping waits in the actor's queue when the actor is dropped: its caller gets what
    # a call made after the drop gets, not a stop of the mesh.
    actor, _ = ends_itself
    ending = getattr(actor, how).call_one()
    queued = actor.ping.call_one()
    with pytest.raises(ActorFailedError):
        ending.get(timeout=30)
    with pytest.raises(ActorDiedError, match=r"The actor ender\{gpus=0\} and all its descend"):
        queued.get(timeout=30)


@pytest.mark.timeout(60)
def test_a_call_to_an_actor_whose_process_died_names_it_in_monarchs_words(
    crash: Crash,
) -> None:
    # A SupervisionError (Monarch's class for it) that is an ActorDiedError (actormesh's).
    assert isinstance(crash.error, ActorDiedError) and isinstance(crash.error, SupervisionError)
    assert re.match(
        r"Endpoint call victim\.die\(\) failed, The actor <root>\.<\S*Victim "
        r"victim\{'gpus': 1/3\}> and all its descendants have failed: actor \{gpus=1\} of "
        r"mesh 'victim' died before answering endpoint 'die': .*exited with code 7",
        str(crash.error),
    ), str(crash.error)
