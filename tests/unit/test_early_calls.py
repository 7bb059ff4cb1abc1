"""Calls that come before their mesh's spawn: held, then run in order, or answered."""

from __future__ import annotations

import asyncio
from typing import Any

from actormesh._core._early_calls import EarlyCalls


def _calls(wait: float = 30.0) -> tuple[EarlyCalls, list[Any], asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    replayed: list[Any] = []
    early = EarlyCalls(loop, wait, lambda conn, header, parts: replayed.append(header))
    return early, replayed, loop


def test_held_calls_run_in_the_order_they_came_when_the_spawn_comes() -> None:
    early, replayed, loop = _calls()
    try:
        assert early.hold("m", (None, ("CALL", 1), []))  # type: ignore[arg-type]
        assert early.hold("m", (None, ("CALL", 2), []))  # type: ignore[arg-type]
        assert early.hold("other", (None, ("CALL", 3), []))  # type: ignore[arg-type]
        assert replayed == []
        early.arrived("m")
        assert replayed == [("CALL", 1), ("CALL", 2)]
        early.arrived("m")  # nothing held any more
        assert replayed == [("CALL", 1), ("CALL", 2)]
    finally:
        loop.close()


def test_calls_to_a_stopped_mesh_are_not_held_and_held_ones_are_answered() -> None:
    early, replayed, loop = _calls()
    try:
        assert early.hold("m", (None, ("CALL", 1), []))  # type: ignore[arg-type]
        early.ended("m")
        assert replayed == [("CALL", 1)]  # answered now (as a call to an actor not here)
        assert not early.hold("m", (None, ("CALL", 2), []))  # type: ignore[arg-type]
    finally:
        loop.close()


def test_a_call_whose_spawn_never_comes_is_answered_after_the_wait() -> None:
    loop = asyncio.new_event_loop()
    answered: asyncio.Future[Any] = loop.create_future()
    early = EarlyCalls(loop, 0.05, lambda conn, header, parts: answered.set_result(header))
    try:
        assert early.hold("m", (None, ("CALL", 1), []))  # type: ignore[arg-type]
        assert not answered.done()
        # The loop runs the expiry timer, which answers the call.
        assert loop.run_until_complete(asyncio.wait_for(answered, 10)) == ("CALL", 1)
        assert not early.hold("m", (None, ("CALL", 2), []))  # type: ignore[arg-type]
    finally:
        loop.close()
