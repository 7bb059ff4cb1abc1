"""Futures, streams and the other call adverbs of ``monarch.actor`` 0.7.

- ``Future.get(timeout=...)`` raises the builtin ``TimeoutError`` and leaves the future
  pending (a later ``get`` returns the value); ``result(timeout=...)`` and
  ``exception(timeout=...)`` wait as ``get`` does (``get()`` inside an ``async``
  endpoint, where actormesh differs on purpose, is ``future_get_in_async_endpoint.py``);
- futures awaited in asyncio code: ``await``, ``asyncio.gather``, ``asyncio.wait_for``,
  ``as_asyncio()``;
- ``stream()`` yields futures in completion order, a failing rank's raising
  ``ActorError``;
- ``choose`` (one actor), ``call_one`` on a mesh of several (``ValueError`` at once), and
  arguments checked against the endpoint's signature when calling (``TypeError``);
- one message at a time per actor, even for ``async`` endpoints; a
  ``@concurrent_endpoint`` lets the next message in while it waits.

Every check runs; the failures are listed at the end.
"""

from __future__ import annotations

import asyncio
import time
import traceback

from monarch.actor import (
    Actor,
    ActorError,
    Future,
    concurrent_endpoint,
    context,
    endpoint,
    this_host,
)

failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok    {name}")
    except Exception:
        failures.append(name)
        print(f"FAIL  {name}\n{traceback.format_exc()}")


class Sleeper(Actor):
    def __init__(self):
        self.stop_requested = False
        self.rounds = 0

    @endpoint
    async def nap(self, seconds):
        await asyncio.sleep(seconds)
        return f"napped {seconds}"

    @endpoint
    async def rank_after(self, delays):
        me = context().actor_instance.rank["gpus"]
        await asyncio.sleep(delays[me])
        return me

    @endpoint
    async def fail_on(self, bad):
        me = context().actor_instance.rank["gpus"]
        if me == bad:
            raise ZeroDivisionError(f"rank {me} fails")
        return me

    @endpoint
    async def add(self, a, b=0):
        return a + b

    @endpoint
    async def loop(self, limit):
        self.stop_requested, self.rounds = False, 0
        while not self.stop_requested and self.rounds < limit:
            self.rounds += 1
            await asyncio.sleep(0.05)
        return self.rounds

    @concurrent_endpoint
    async def concurrent_loop(self, limit):
        self.stop_requested, self.rounds = False, 0
        while not self.stop_requested and self.rounds < limit:
            self.rounds += 1
            await asyncio.sleep(0.05)
        return self.rounds

    @endpoint
    async def request_stop(self):
        self.stop_requested = True


mesh = this_host().spawn_procs(per_host={"gpus": 3}).spawn("sleeper", Sleeper)
one = mesh.slice(gpus=0)


def get_timeout_leaves_future_pending():
    fut = one.nap.call_one(1.0)
    assert isinstance(fut, Future)
    start = time.monotonic()
    try:
        fut.get(timeout=0.2)
        raise AssertionError("get(timeout=0.2) should time out")
    except TimeoutError:
        assert time.monotonic() - start < 0.9
    assert fut.get(timeout=10) == "napped 1.0"
    assert fut.result() == "napped 1.0" and fut.exception() is None


def result_waits_like_get():
    assert one.nap.call_one(0.3).result(timeout=10) == "napped 0.3"


def exception_method_returns_the_error():
    fut = mesh.fail_on.call(1)
    error = fut.exception(timeout=10)
    assert isinstance(error, ActorError), error
    assert isinstance(error.exception, ZeroDivisionError)


def awaited_in_asyncio():
    async def main():
        values = await mesh.add.call(1, b=2)
        assert values.values() == [3, 3, 3]
        assert await one.add.call_one(5) == 5
        both = await asyncio.gather(one.nap.call_one(0.1), mesh.add.call(2))
        assert both[0] == "napped 0.1" and both[1].values() == [2, 2, 2]
        assert await one.nap.call_one(0.05).as_asyncio() == "napped 0.05"
        try:
            await asyncio.wait_for(one.nap.call_one(2.0), timeout=0.2)
            raise AssertionError("wait_for should time out")
        except TimeoutError:
            pass

    asyncio.run(main())


def stream_in_completion_order():
    start = time.monotonic()
    order = [
        (f.get(timeout=10), round(time.monotonic() - start, 1))
        for f in mesh.rank_after.stream([1.2, 0.6, 0.0])
    ]
    ranks = [rank for rank, _ in order]
    assert ranks == [2, 1, 0], order


def stream_with_a_failing_rank():
    results = []
    for f in mesh.fail_on.stream(2):
        try:
            results.append(f.get(timeout=10))
        except ActorError as e:
            results.append(type(e.exception).__name__)
    assert sorted(map(str, results)) == ["0", "1", "ZeroDivisionError"], results


def choose_calls_one_actor():
    assert mesh.add.choose(7).get(timeout=10) == 7


def call_one_needs_one_actor():
    try:
        mesh.add.call_one(1)
    except ValueError:
        return
    raise AssertionError("call_one on 3 actors should raise ValueError")


def arguments_checked_when_calling():
    try:
        mesh.add.call(1, 2, 3)
    except TypeError:
        return
    raise AssertionError("too many arguments should raise TypeError at the call")


def one_message_at_a_time():
    run = one.loop.call_one(20)
    time.sleep(0.2)
    one.request_stop.call_one().get(timeout=10)  # waits for loop to end first
    assert run.get(timeout=10) == 20


def concurrent_endpoint_lets_messages_in():
    run = one.concurrent_loop.call_one(200)
    time.sleep(0.3)
    one.request_stop.call_one().get(timeout=10)
    rounds = run.get(timeout=10)
    assert rounds < 200, rounds


for name, fn in list(globals().items()):
    is_check = callable(fn) and getattr(fn, "__module__", None) == __name__
    if is_check and name[0].islower() and name != "check":
        check(name, fn)

print(f"{len(failures)} check(s) failed: {failures}" if failures else "all future checks OK")
raise SystemExit(1 if failures else 0)
