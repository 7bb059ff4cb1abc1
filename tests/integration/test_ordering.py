"""Ordering (issue 2, point 13): send order per sender, one message at a time per actor."""

from __future__ import annotations

import asyncio

import pytest
from integration_actors import Recorder, Relay

from actormesh import ActorMesh, ProcMesh
from actormesh.testing import run


@pytest.fixture
def recorder(procs: ProcMesh) -> ActorMesh[Recorder]:
    return procs.spawn("recorder", Recorder)  # type: ignore[return-value]


def test_calls_from_one_sender_are_handled_in_send_order(recorder: ActorMesh[Recorder]) -> None:
    target = recorder[1, 1]

    async def main() -> list[int]:
        futures = [target.record.call_one(i) for i in range(1000)]
        await asyncio.gather(*futures)
        return await target.recorded.call_one()

    assert run(main()) == list(range(1000))


def test_def_and_async_def_calls_keep_their_order(recorder: ActorMesh[Recorder]) -> None:
    target = recorder[0, 1]
    futures = [(target.record_sync if i % 3 else target.record).call_one(i) for i in range(300)]
    for future in futures:
        future.get(timeout=30)
    assert target.recorded.call_one().get(timeout=30) == list(range(300))


def test_broadcasts_and_calls_from_one_sender_keep_their_order(
    recorder: ActorMesh[Recorder],
) -> None:
    for i in range(100):
        recorder.record.broadcast(i)
    recorder.slice(dp=0).record.call("last").get(timeout=30)
    recorded = recorder.recorded.call().get(timeout=30)
    assert recorded.item(dp=0, tp=0) == [*range(100), "last"]
    assert recorded.item(dp=1, tp=1) == list(range(100))


def test_calls_from_an_actor_to_another_actor_arrive_in_order(
    procs: ProcMesh, recorder: ActorMesh[Recorder]
) -> None:
    relay = procs.spawn("ordered_sender", Relay)
    relay[0, 0].send_in_order.call_one(recorder[1, 0], 500).get(timeout=30)
    assert recorder[1, 0].recorded.call_one().get(timeout=30) == list(range(500))


def test_an_actor_handles_one_message_at_a_time(recorder: ActorMesh[Recorder]) -> None:
    target = recorder[0, 0]

    async def main() -> list[int]:
        return await asyncio.gather(*[target.overlap.call_one(0.02) for _ in range(5)])

    # Each handler awaits inside; still, none starts before the previous one ended.
    assert run(main()) == [1, 1, 1, 1, 1]


def test_def_and_async_def_calls_never_overlap(recorder: ActorMesh[Recorder]) -> None:
    target = recorder[1, 0]

    async def main() -> list[int]:
        # def and async def calls alternate in runs: the queue passes between the actor's
        # thread and the event loop, one message at a time throughout.
        kinds = [target.overlap_sync, target.overlap_sync, target.overlap, target.overlap_sync]
        calls = [kinds[i % 4].call_one(0.01) for i in range(12)]
        return await asyncio.gather(*calls)

    assert run(main()) == [1] * 12


def test_concurrent_endpoints_overlap(recorder: ActorMesh[Recorder]) -> None:
    target = recorder[0, 0]

    async def main() -> list[int]:
        return await asyncio.gather(*[target.concurrent_overlap.call_one(0.2) for _ in range(5)])

    most = run(main())
    assert max(most) >= 2  # several ran at once (all five, unless the machine is slow)
