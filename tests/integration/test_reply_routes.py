"""Replies read on the caller's own event loop (reply routes) keep every promise.

Calls made on an asyncio loop get their replies on a connection that loop reads itself
(no hop through the runtime's thread). These tests hold the cases where that loop is not
there to read: a blocking ``get()`` on the loop's own thread, a loop that closed before
the answer came, a future awaited on another loop; and that order and deaths are as
without routes. Sync code's threads have routes too, read by their own ``get()``: the
tests at the end hold the cases where that thread is not the one waiting.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import uvloop
from integration_actors import Echo, Recorder, Sleeper

from actormesh import ActorDiedError, ActorMesh, CallTimeoutError, ProcMesh, proc_mesh
from actormesh._core._reply_routes import _ROUTE_AFTER
from actormesh._hosts import Runtime
from actormesh.testing import wait_until

T = TypeVar("T")

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


async def warm_up(mesh: ActorMesh[Any]) -> None:
    """Make the calls after which this loop's calls to ``mesh`` are routed."""
    for _ in range(_ROUTE_AFTER):
        await mesh.ping.call_one()


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("routed_echo", Echo)  # type: ignore[return-value]


@pytest.mark.parametrize("runner", ["asyncio", "uvloop"])
def test_calls_on_an_event_loop_are_answered_on_that_loop(
    echo: ActorMesh[Echo], runner: str
) -> None:
    # A future's callbacks run on the thread that read its reply: the loop's own thread,
    # not the runtime's.
    async def main() -> tuple[list[object], set[int]]:
        await warm_up(echo[0, 1])
        readers: set[int] = set()
        values = []
        for i in range(5):
            future = echo[0, 1].async_echo.call_one(i)
            future.add_done_callback(lambda _: readers.add(threading.get_ident()))
            values.append(await future)
        return values, readers

    values, readers = RUNNERS[runner](main())
    assert [v[1] for v in values] == [0, 1, 2, 3, 4]  # type: ignore[index]
    assert readers == {threading.get_ident()}


def test_an_await_reads_a_quick_reply_itself_only_when_nothing_else_is_ready(
    echo: ActorMesh[Echo],
) -> None:
    # Config.reply_spin: before yielding, an await polls the loop's route, but only while
    # no other callback waits to run on the loop (it would be held up meanwhile).
    async def main() -> tuple[bool, bool, object]:
        await warm_up(echo[0, 0])
        loop = asyncio.get_running_loop()
        route = Runtime.get().routes._routes[loop]
        route._spin = 30.0  # long enough for any reply; polling stops once it is read
        busy = echo[0, 0].async_echo.call_one("busy")
        loop.call_soon(lambda: None)  # another callback is ready: no polling
        route.poll_briefly(busy.done)
        read_while_busy = busy.done()  # only a poll on this thread could have read it
        await busy
        idle = echo[0, 0].async_echo.call_one("idle")
        route.poll_briefly(idle.done)
        return read_while_busy, idle.done(), idle.get(timeout=0)

    read_while_busy, read_while_idle, value = asyncio.run(main())
    assert (read_while_busy, read_while_idle) == (False, True)
    assert value == ("async", "idle", "echo")


def test_get_on_the_loop_thread_reads_the_reply_itself(echo: ActorMesh[Echo]) -> None:
    # Sync style inside a coroutine (a notebook cell calling .get()): the loop is blocked
    # in get(), so get() must read the loop's replies itself instead of hanging.
    async def main() -> list[object]:
        await warm_up(echo[1, 0])
        return [echo[1, 0].async_echo.call_one(i).get(timeout=30) for i in range(3)]

    assert [r[1] for r in asyncio.run(main())] == [0, 1, 2]  # type: ignore[index]


def test_get_on_the_loop_thread_times_out_with_the_pending_actor(procs: ProcMesh) -> None:
    sleepers = procs.spawn("routed_sleeper", Sleeper)

    async def main() -> None:
        await warm_up(sleepers[0, 0])
        future = sleepers[0, 0].nap.call_one(5.0)
        start = time.monotonic()
        with pytest.raises(CallTimeoutError) as caught:
            future.get(timeout=0.2)
        assert time.monotonic() - start < 3
        assert caught.value.pending == (0,)

    asyncio.run(main())


def test_a_future_outlives_the_loop_it_was_made_on(echo: ActorMesh[Echo]) -> None:
    async def make() -> object:
        await warm_up(echo[1, 0])
        await warm_up(echo[1, 1])
        return echo.slice(dp=1).async_echo.call("late")

    future = asyncio.run(make())  # the loop is closed before anyone waits
    values = future.get(timeout=30)  # type: ignore[attr-defined]
    assert [v[1] for v in values.values()] == ["late", "late"]


def test_a_future_made_on_one_loop_is_awaited_on_another(echo: ActorMesh[Echo]) -> None:
    async def make() -> object:
        await warm_up(echo[0, 0])
        return echo[0, 0].async_echo.call_one("moved")

    future = asyncio.run(make())

    async def wait() -> object:
        return await future  # type: ignore[misc]

    assert asyncio.run(wait()) == ("async", "moved", "echo")


def test_order_holds_between_sync_code_and_an_event_loop(procs: ProcMesh) -> None:
    recorder = procs.spawn("routed_recorder", Recorder)[0, 0]
    # Fire-and-forget from sync code, then calls from a loop: the loop's calls go out on
    # the same connection, after them, and run after them.
    for i in range(50):
        recorder.record.broadcast(i)

    async def main() -> list[object]:
        for i in range(2 * _ROUTE_AFTER):  # the later ones are routed
            await recorder.record.call_one(f"loop {i}")
        return await recorder.recorded.call_one()  # type: ignore[no-any-return]

    recorded = asyncio.run(main())
    assert recorded == [*range(50), *(f"loop {i}" for i in range(2 * _ROUTE_AFTER))]


def test_a_worker_killed_during_a_routed_call_fails_it() -> None:
    async def main() -> None:
        procs = await proc_mesh(gpus=1)
        try:
            sleeper = await procs.spawn("routed_victim", Sleeper)
            await warm_up(sleeper)
            pid = await sleeper.pid.call_one()
            pending = sleeper.nap.call_one(30.0)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(ActorDiedError):
                await pending.wait(30)
        finally:
            await procs.stop()

    asyncio.run(main())


def test_loops_that_come_and_go_leave_no_connections_behind(echo: ActorMesh[Echo]) -> None:
    # A program that runs asyncio.run over and over: each run's route closes once its loop
    # has closed and no call waits on it, so descriptors do not pile up.
    async def session() -> None:
        await warm_up(echo[0, 0])
        await echo[0, 0].ping.call_one()  # routed

    asyncio.run(session())
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(30):
        asyncio.run(session())
    after = len(os.listdir("/proc/self/fd"))
    assert after - before <= 2, f"{after - before} descriptors more after 30 loops"


# -- threads without an event loop (sync code) ------------------------------------------


def warm_up_sync(mesh: ActorMesh[Any]) -> None:
    """Make the calls after which this thread's calls to ``mesh`` are routed."""
    for _ in range(_ROUTE_AFTER):
        mesh.ping.call_one().get(timeout=30)


def thread_route() -> Any:
    """This thread's route, if it has one (read by its own ``get()``)."""
    return Runtime.get().routes._threads.get(threading.get_ident())


def test_sync_calls_read_their_replies_on_the_calling_thread(echo: ActorMesh[Echo]) -> None:
    def main() -> tuple[list[object], bool, int]:
        warm_up_sync(echo[0, 1])
        values = [echo[0, 1].async_echo.call_one(i).get(timeout=30) for i in range(5)]
        route = thread_route()  # looked at here: once the thread ends, it is closed
        assert route is not None
        return values, route.adopted, len(route._conns)

    values, adopted, connections = run_in_thread(main)
    assert [v[1] for v in values] == [0, 1, 2, 3, 4]  # type: ignore[index]
    assert not adopted  # read by get(), never handed to the runtime
    assert connections == 1


def test_a_done_callback_hands_the_thread_route_to_the_runtime(echo: ActorMesh[Echo]) -> None:
    # Nobody pumps a future that is only watched by a callback: the runtime reads it.
    def main() -> tuple[object, int, bool]:
        warm_up_sync(echo[1, 1])
        warm_up_sync(echo[1, 1])
        called = threading.Event()
        readers: list[int] = []
        future = echo[1, 1].async_echo.call_one("watched")
        future.add_done_callback(lambda _: (readers.append(threading.get_ident()), called.set()))
        assert called.wait(30), "the callback never ran: nobody read the reply"
        return future.get(timeout=1), readers[0], thread_route() is None

    value, reader, route_gone = run_in_thread(main)
    assert value == ("async", "watched", "echo")
    assert reader != threading.get_ident() and route_gone


def test_get_on_another_thread_than_the_caller_returns(echo: ActorMesh[Echo]) -> None:
    def make() -> Any:
        warm_up_sync(echo[1, 0])
        return echo[1, 0].async_echo.call_one("elsewhere")  # routed, never pumped here

    future = run_in_thread(make)
    assert future.get(timeout=30) == ("async", "elsewhere", "echo")


def test_a_thread_that_leaves_its_calls_unread_does_not_leak_them(procs: ProcMesh) -> None:
    # A routed call whose thread ended without waiting: the runtime reads its reply, so
    # the call is not counted in flight for ever (choose() relies on that count).
    sleepers = procs.spawn("routed_orphan", Sleeper)

    def main() -> None:
        warm_up_sync(sleepers[0, 0])
        sleepers[0, 0].nap.call_one(0.1)

    run_in_thread(main)
    state = sleepers._state
    wait_until(lambda: state.in_flight([0]) == [0], 30, "the orphaned call to finish")


def test_a_routed_sync_get_times_out_and_a_later_get_returns(procs: ProcMesh) -> None:
    sleepers = procs.spawn("routed_slow", Sleeper)

    def main() -> int:
        warm_up_sync(sleepers[0, 1])
        future = sleepers[0, 1].nap.call_one(1.0)
        start = time.monotonic()
        with pytest.raises(CallTimeoutError):
            future.get(timeout=0.1)
        assert time.monotonic() - start < 3
        return future.get(timeout=30)  # type: ignore[no-any-return]

    assert run_in_thread(main) == 1  # its rank


def test_a_worker_killed_during_a_routed_sync_call_fails_it_at_once() -> None:
    # The death is seen by the runtime's thread: the pumping get() is woken, not left to
    # its next look at the future.
    with proc_mesh(gpus=1).get(timeout=60) as procs:
        sleeper = procs.spawn("routed_sync_victim", Sleeper)
        warm_up_sync(sleeper)
        pid = sleeper.pid.call_one().get(timeout=30)
        pending = sleeper.nap.call_one(30.0)
        threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)).start()
        start = time.monotonic()
        with pytest.raises(ActorDiedError):
            pending.get(timeout=30)
        assert time.monotonic() - start < 10
        route = thread_route()
        if route is not None:  # its socket to the dead process closes
            wait_until(lambda: not route._conns, 10, "the route's socket to close")


def run_in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` on a new thread (a fresh thread has no route yet)."""
    results: list[Any] = []

    def body() -> None:
        try:
            results.append((True, fn()))
        except BaseException as error:
            results.append((False, error))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(60)
    assert results, "the thread did not finish"
    ok, value = results[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
