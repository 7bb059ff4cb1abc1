"""Lifetimes: ``__cleanup__``, stopping meshes, ``get_or_spawn_controller``, process
meshes started by actors, and the ``Actor`` base class, as in Monarch 0.7."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from actormesh import MeshStoppedError
from actormesh.actor import (
    Channel,
    Port,
    PortReceiver,
    ProcMesh,
    get_or_spawn_controller,
    this_host,
)
from actormesh.testing import process_gone, wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import (
        AsyncThreadLocal,
        CancelledBeforeCleanup,
        Cleaner,
        CountsCleanups,
        Echo,
        KeepsAModuleGlobal,
        OwnsMeshes,
        SiblingMaker,
        Spawner,
        SyncCleaner,
        SyncThreadLocal,
    )
else:
    from monarch_actors import (
        AsyncThreadLocal,
        CancelledBeforeCleanup,
        Cleaner,
        CountsCleanups,
        Echo,
        KeepsAModuleGlobal,
        OwnsMeshes,
        SiblingMaker,
        Spawner,
        SyncCleaner,
        SyncThreadLocal,
    )


def _receive(
    receiver: PortReceiver[tuple[str, int, str]], count: int, timeout: float
) -> list[tuple[str, int, str]]:
    """``count`` messages of ``receiver``, all within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    return [
        receiver.recv().get(timeout=max(deadline - time.monotonic(), 0.0)) for _ in range(count)
    ]


def test_actor_mesh_stop_runs_cleanup_with_none(procs: ProcMesh) -> None:
    port: Port[tuple[str, int, str]]
    port, receiver = Channel.open()
    classes: list[type[Cleaner | SyncCleaner]] = [Cleaner, SyncCleaner]
    for cls in classes:
        mesh = procs.spawn("cleaned", cls, port)
        assert mesh.ping.call().get(timeout=30).values() == ["pong"] * 4
        mesh.stop().get(timeout=30)
        got = sorted(_receive(receiver, 4, timeout=30))
        assert got == [("cleanup", rank, "None") for rank in range(4)], cls.__name__


@pytest.mark.timeout(60)
def test_proc_mesh_stop_runs_cleanup_with_none() -> None:
    port: Port[tuple[str, int, str]]
    port, receiver = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        classes: list[type[Cleaner | SyncCleaner]] = [Cleaner, SyncCleaner]
        for cls in classes:
            mesh = procs.spawn(cls.__name__.lower(), cls, port)
            assert mesh.ping.call().get(timeout=30).values() == ["pong"] * 2
    finally:
        assert procs.stop().get(timeout=30) is None
    got = sorted(_receive(receiver, 4, timeout=2))
    assert got == [("cleanup", rank, "None") for rank in (0, 0, 1, 1)]


@pytest.mark.timeout(60)
def test_a_mesh_an_actor_just_spawned_answers_the_first_call_of_whoever_gets_it() -> None:
    # The spawn leaves the actor on one connection, the caller's call on another: the
    # call may come first, and waits for the spawn (it failed about one time in ten).
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        maker = procs.spawn("maker", SiblingMaker)
        for index in range(30):
            sibling = maker.sibling.call_one(index).get(timeout=30)
            assert sibling.get_tag.call_one().get(timeout=30) == "sibling"
    finally:
        procs.stop().get(timeout=30)


def test_proc_mesh_stop_ends_its_actors_and_may_be_repeated() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    echo = procs.spawn("short_lived", Echo)
    assert echo.ping.call().get(timeout=30).values() == ["pong"]
    assert procs.stop().get(timeout=30) is None
    assert procs.stop().get(timeout=30) is None
    # actormesh's MeshStoppedError (Monarch raises its SupervisionError, not exported).
    with pytest.raises(MeshStoppedError, match=r"^actor mesh 'short_lived' was stopped"):
        echo.ping.call().get(timeout=30)


def test_stop_takes_a_reason_that_later_calls_report() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    echo = procs.spawn("reasoned", Echo)
    other = procs.spawn("other", Echo)
    assert echo.ping.call_one().get(timeout=30) == "pong"
    echo.stop("done with it").get(timeout=30)  # Monarch 0.7: stop(reason="stopped by client")
    with pytest.raises(MeshStoppedError, match=r"was stopped \(done with it\)"):
        echo.ping.call_one().get(timeout=30)
    procs.stop(reason="the job ended").get(timeout=30)
    with pytest.raises(MeshStoppedError, match=r"was stopped \(the job ended\)"):
        other.ping.call_one().get(timeout=30)


def test_get_or_spawn_controller_gives_the_same_actor_each_time() -> None:
    # The controller actor lives as long as this process (Monarch cannot stop it).
    first = get_or_spawn_controller("monarch_test_counter", Echo, "controller").get(timeout=30)
    second = get_or_spawn_controller("monarch_test_counter", Echo, "other").get(timeout=30)
    assert dict(first.extent) == {}
    assert first.inc.call_one().get(timeout=30) == 1
    assert second.inc.call_one().get(timeout=30) == 2
    assert second.get_tag.call_one().get(timeout=30) == "controller"
    # Spawned on this_proc(): in the controller's own process.
    assert first.pid.call_one().get(timeout=30) == os.getpid()


@pytest.mark.timeout(60)
def test_an_actor_starts_processes_in_its_init() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        spawner = procs.spawn("spawner", Spawner)
        try:
            assert spawner.child_tag.call_one().get(timeout=30) == "child"
        finally:
            spawner.stop_procs.call_one().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)


@pytest.mark.timeout(60)
def test_an_async_endpoint_starts_processes() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        spawner = procs.spawn("spawner", Spawner)
        try:
            assert spawner.spawn_in_endpoint.call_one().get(timeout=30) == "late"
        finally:
            spawner.stop_procs.call_one().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)


def test_an_actor_has_a_logger_named_after_its_class(procs: ProcMesh) -> None:
    echo = procs.spawn("logged", Echo).slice(nodes=0, gpus=0)
    assert echo.logger_name.call_one().get(timeout=30) == "Echo"


@pytest.mark.parametrize("cls", [AsyncThreadLocal, SyncThreadLocal])
def test_thread_local_state_made_in_init_is_there_in_the_endpoints(
    procs: ProcMesh, cls: type[AsyncThreadLocal | SyncThreadLocal]
) -> None:
    # As in Monarch, an actor's code runs on one thread: its loop's for an async actor.
    actor = procs.spawn(f"tls_{cls.__name__.lower()}", cls).slice(nodes=0, gpus=0)
    assert [actor.increment.call_one().get(timeout=30) for _ in range(3)] == [1, 2, 3]
    if cls is AsyncThreadLocal:
        assert actor.same_thread_as_init.call_one().get(timeout=30) is True


@pytest.mark.timeout(60)
def test_stopping_cancels_running_concurrent_endpoints_before_cleanup() -> None:
    port: Port[str]
    port, receiver = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        actor = procs.spawn("cancelled_first", CancelledBeforeCleanup, port)
        pending = actor.wait_forever.call_one()
        assert actor.until_started.call_one().get(timeout=30) == "started"
    finally:
        procs.stop().get(timeout=30)
    assert [receiver.recv().get(timeout=10) for _ in range(2)] == ["task cancelled", "cleanup"]
    with pytest.raises(MeshStoppedError):
        pending.get(timeout=10)


@pytest.mark.timeout(60)
def test_stopped_processes_finalize_their_interpreter(tmp_path: Path) -> None:
    # As Monarch's: a process that is told to stop exits as a Python program ends, so
    # finalizers of module globals (and atexit handlers) run.
    marker = tmp_path / "finalized.txt"
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        keeper = procs.spawn("keeper", KeepsAModuleGlobal, str(marker))
        pid = keeper.pid.call_one().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)
    wait_until(lambda: process_gone(pid), 30, "the process to end")
    assert marker.read_text() == "finalized"


@pytest.mark.timeout(90)
def test_stopping_an_actor_stops_the_meshes_it_spawned() -> None:
    # As Monarch's recursive stop: what an actor spawned (actors on processes it was
    # given, processes of its own and their actors) stops with it, cleanups included.
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        counter = procs.spawn("cleanups", CountsCleanups)
        owner = procs.spawn("owner", OwnsMeshes, procs, counter)
        assert owner.ready.call_one().get(timeout=60) == "pong"
        own_pids = owner.own_pids.call_one().get(timeout=30)
        owner.stop().get(timeout=60)
        assert counter.value.call_one().get(timeout=30) == 2
        wait_until(lambda: all(process_gone(pid) for pid in own_pids), 30, "its processes")
    finally:
        procs.stop().get(timeout=30)
