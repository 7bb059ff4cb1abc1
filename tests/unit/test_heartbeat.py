"""The heartbeat monitor's rules, on a simulated clock; the deferral queue's order."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from actormesh._core._deferral import Deferrals
from actormesh._hosts._heartbeat import HeartbeatMonitor


class FakeLoop:
    """Just what the monitor uses: ``time`` and ``call_later``, driven by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[..., Any], tuple[Any, ...]]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> FakeTimer:
        self.timers.append((self.now + delay, fn, args))
        return FakeTimer()

    def advance(self, seconds: float) -> None:
        """Move the clock, running the timers that come due, in order."""
        end = self.now + seconds
        while True:
            due = sorted((t for t in self.timers if t[0] <= end), key=lambda t: t[0])
            if not due:
                break
            when, fn, args = due[0]
            self.timers.remove(due[0])
            self.now = max(self.now, when)
            fn(*args)
        self.now = end


class FakeTimer:
    def cancel(self) -> None:
        pass


class FakeChild:
    def __init__(self, path: str) -> None:
        self.listen_path = path
        self.pid = os.getpid()  # a live process in state R or S
        self.rank = 0
        self.local = True

    def alive(self) -> bool:
        return True


def monitor(loop: FakeLoop, dead: list[str], answer: bool) -> HeartbeatMonitor:
    box: list[HeartbeatMonitor] = []

    def probe(child: Any, seq: int) -> bool:
        if answer:
            box[0].answered(child.listen_path)
        return True

    hb = HeartbeatMonitor(
        loop,  # type: ignore[arg-type]
        interval=1.0,
        timeout=4.0,
        probe=probe,
        declare_dead=lambda child, note: dead.append(note),
    )
    box.append(hb)
    return hb


def test_a_worker_that_answers_is_never_declared_dead() -> None:
    loop, dead = FakeLoop(), []
    monitor(loop, dead, answer=True).track(FakeChild("a"))  # type: ignore[arg-type]
    loop.advance(60)
    assert dead == []


def test_a_silent_worker_is_declared_dead_once_after_the_timeout() -> None:
    loop, dead = FakeLoop(), []
    monitor(loop, dead, answer=False).track(FakeChild("a"))  # type: ignore[arg-type]
    loop.advance(3.9)
    assert dead == []
    loop.advance(1.2)  # silent > 4 s, noticed at the next probe
    assert len(dead) == 1 and "stopped answering heartbeats for 5.0 s (limit 4 s" in dead[0]
    loop.advance(30)
    assert len(dead) == 1


def test_the_owners_own_stall_is_not_blamed_on_its_workers() -> None:
    loop, dead = FakeLoop(), []
    monitor(loop, dead, answer=False).track(FakeChild("a"))  # type: ignore[arg-type]
    loop.advance(1.0)
    loop.now += 10.0  # the owner's loop could not run for 10 s
    loop.advance(2.5)
    assert dead == []


def test_held_sends_run_in_order_and_later_ones_after_them() -> None:
    deferrals, ran = Deferrals(), []
    assert not deferrals.defer("p", lambda error: ran.append(("early", error)))
    deferrals.begin("p")
    assert deferrals.active("p")
    for name in ("a", "b", "c"):
        assert deferrals.defer("p", lambda error, name=name: ran.append((name, error)))
    deferrals.end("p", None)
    assert ran == [("a", None), ("b", None), ("c", None)]
    assert not deferrals.active("p")
    assert not deferrals.defer("p", lambda error: None)


def test_held_sends_learn_why_a_restart_failed() -> None:
    deferrals, ran = Deferrals(), []
    deferrals.begin("p")
    deferrals.defer("p", ran.append)
    failure = RuntimeError("no")
    deferrals.end("p", failure)
    assert ran == [failure]
