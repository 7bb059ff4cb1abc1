"""Futures (issue 2, point 5): ``await``, ``get(timeout)``, and no deadlock on the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from integration_actors import Echo, Relay, Sleeper

from actormesh import ActorMesh, CallTimeoutError, Future, ProcMesh
from actormesh.testing import run, wait_until


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("echo", Echo)  # type: ignore[return-value]


def test_every_adverb_that_answers_returns_a_future(echo: ActorMesh[Echo]) -> None:
    one = echo[0, 0]
    futures = [
        echo.async_echo.call(1),
        one.async_echo.call_one(1),
        echo.async_echo.choose(1),
        echo.async_echo.all(1),
    ]
    assert all(isinstance(f, Future) for f in futures)
    for future in futures:
        future.get(timeout=30)
        assert future.done()


def test_await_works_on_any_event_loop(echo: ActorMesh[Echo]) -> None:
    async def main() -> tuple[object, object]:
        first = await echo[0, 0].async_echo.call_one("a")
        both = await asyncio.gather(
            echo[0, 1].async_echo.call_one("b"), echo[1, 0].sync_echo.call_one("c")
        )
        return first, both

    # Two separate loops, one after the other, as two notebook cells or two asyncio.run.
    assert run(main())[0] == ("async", "a", "echo")
    assert run(main())[1][0] == ("async", "b", "echo")  # type: ignore[index]


def test_get_works_from_plain_threads(echo: ActorMesh[Echo]) -> None:
    results: list[object] = []

    def worker(i: int) -> None:
        results.append(echo[1, 1].async_echo.call_one(i).get(timeout=30))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(r[1] for r in results) == [0, 1, 2, 3]  # type: ignore[index]


def test_get_timeout_raises_call_timeout_error_naming_the_pending_actors(
    procs: ProcMesh,
) -> None:
    sleepers = procs.spawn("slow_for_timeout", Sleeper)
    future = sleepers.slice(dp=1).nap.call(3.0)  # outlasts the timeout and its inspection
    start = time.monotonic()
    with pytest.raises(CallTimeoutError) as caught:
        future.get(timeout=0.05)
    assert time.monotonic() - start < 2.5
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert error.pending == (2, 3)
    assert "{dp=1, tp=0}" in str(error)
    assert "{dp=1, tp=1}" in str(error)
    assert "'slow_for_timeout'" in str(error)
    assert "'nap'" in str(error)
    # The call goes on (as with concurrent.futures): a later wait gets its value.
    assert not future.done()
    assert future.get(timeout=30).values() == [2, 3]
    assert sleepers.slice(dp=1).ping.call().get(timeout=30).item(tp=0) == "pong"


def test_cancelling_an_await_cancels_the_call(procs: ProcMesh) -> None:
    sleepers = procs.spawn("slow_for_wait_for", Sleeper)
    future = sleepers[0, 0].nap.call_one(0.5)

    async def main() -> None:
        await asyncio.wait_for(_await(future), 0.05)

    with pytest.raises(TimeoutError):
        run(main())
    assert future.cancelled()
    assert sleepers[0, 0].ping.call_one().get(timeout=30) == "pong"


async def _await(future: Future[int]) -> int:
    return await future


def test_get_inside_an_async_endpoint_blocks_that_actor_only(
    procs: ProcMesh, echo: ActorMesh[Echo]
) -> None:
    # Async endpoints run on the actor's own loop, not on the loop that reads the
    # replies: a blocking get() there waits for the value (as Monarch's does).
    relay = procs.spawn("relay_get", Relay)
    sleepers = procs.spawn("neighbours", Sleeper)
    assert relay[0, 0].get_in_async.call_one(echo[1, 1]).get(timeout=30) == ("async", 1, "echo")
    # Meanwhile the process' other actors and its heartbeats were served.
    assert sleepers[0, 0].ping.call_one().get(timeout=30) == "pong"


def test_get_inside_a_def_endpoint_blocks_the_actor_thread_only(
    procs: ProcMesh, echo: ActorMesh[Echo]
) -> None:
    relay = procs.spawn("relay_get_def", Relay)
    assert relay[0, 0].get_in_def.call_one(echo[1, 1]).get(timeout=30) == ("async", 2, "echo")


def test_get_on_the_controllers_io_thread_raises_instead_of_deadlocking(
    procs: ProcMesh,
) -> None:
    sleepers = procs.spawn("slow_for_callback", Sleeper)
    first = sleepers[0, 0].nap.call_one(0.2)
    second = sleepers[0, 1].nap.call_one(1.0)
    seen: list[BaseException] = []
    # Done callbacks run on the thread that resolves the future: the runtime's I/O thread.
    first.add_done_callback(lambda _: _record_get_error(second, seen))
    assert first.get(timeout=30) == 0
    wait_until(lambda: bool(seen), 10, "the callback to run")
    assert isinstance(seen[0], RuntimeError)
    assert "would deadlock" in str(seen[0])
    assert second.get(timeout=30) == 1


def _record_get_error(future: Future[int], seen: list[BaseException]) -> None:
    try:
        future.get(timeout=5)
    except BaseException as error:
        seen.append(error)
    else:
        seen.append(AssertionError("get() returned on the I/O thread"))


def test_a_timeout_that_is_not_a_number_is_refused(echo: ActorMesh[Echo]) -> None:
    future = echo.ping.call()
    with pytest.raises(TypeError, match="timeout must be a number of seconds or None, not '1'"):
        future.get(timeout="1")  # type: ignore[arg-type]
    assert future.get(timeout=30).values() == ["pong"] * len(echo)
