"""Cancellation reaches the actor: async endpoints stop, def endpoints see the flag."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from faults_actors import Cancellable

from actormesh import ActorMesh, CallTimeoutError, ProcMesh, proc_mesh
from actormesh.testing import wait_until


@pytest.fixture
def actor() -> Iterator[ActorMesh[Cancellable]]:
    procs: ProcMesh = proc_mesh(gpus=1).get(timeout=30)
    try:
        yield procs.spawn("cancel", Cancellable)
    finally:
        procs.stop().get(timeout=30)


def events(actor: ActorMesh[Cancellable]) -> list[str]:
    return list(actor.log.call_one().get(timeout=10))


def test_cancelling_a_future_cancels_the_async_endpoint(actor: ActorMesh[Cancellable]) -> None:
    future = actor.wait_async.call_one(30)
    wait_until(lambda: events(actor) == ["async started"], 5, "the call to start")
    assert future.cancel()
    assert future.cancelled()
    wait_until(lambda: events(actor)[1:] == ["async cancelled"], 5, "the endpoint to stop")
    # The actor goes on with its next messages.
    assert actor.wait_async.call_one(0).get(timeout=10) == "finished"


def test_cancelling_the_awaiting_task_cancels_the_endpoint(actor: ActorMesh[Cancellable]) -> None:
    async def main() -> None:
        task = asyncio.ensure_future(actor.wait_async.call_one(30).wait())
        await asyncio.sleep(0)  # let the task start awaiting
        while events(actor) != ["async started"]:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    wait_until(lambda: events(actor)[1:] == ["async cancelled"], 5, "the endpoint to stop")


def test_a_sync_endpoint_sees_the_cooperative_flag(actor: ActorMesh[Cancellable]) -> None:
    future = actor.wait_sync.call_one(30)
    wait_until(lambda: events(actor) == ["sync started"], 5, "the call to start")
    with pytest.raises(CallTimeoutError):
        future.get(timeout=0.1)  # a wait that runs out leaves the call going...
    assert not future.done()
    assert future.cancel()  # ...until the caller gives it up
    wait_until(lambda: events(actor)[1:] == ["sync saw the flag"], 5, "the endpoint to notice")


def test_a_queued_call_that_is_cancelled_never_runs(actor: ActorMesh[Cancellable]) -> None:
    first = actor.wait_sync.call_one(1)
    queued = actor.wait_async.call_one(0)
    queued.cancel()
    assert first.get(timeout=10) == "finished"
    assert events(actor) == ["sync started", "sync finished"]
