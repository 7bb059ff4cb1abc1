"""``Future`` (``get``/``result``/``exception``, ``await``), ``stream``, ``ActorError`` and
``returns_future``, as in Monarch 0.7."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import warnings
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

from actormesh.actor import ActorError, Future, ProcMesh, ValueMesh, returns_future
from actormesh.testing import run

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo
else:
    from monarch_actors import Echo


@pytest.fixture
def one(echo: Echo) -> Echo:
    return echo.slice(nodes=0, gpus=0)


def test_a_call_returns_a_future_of_a_value_mesh(echo: Echo) -> None:
    future = echo.ping.call()
    assert isinstance(future, Future)
    result = future.get(timeout=30)
    assert isinstance(result, ValueMesh)
    assert result.values() == ["pong"] * 4


def test_get_with_a_timeout_raises_timeout_error_and_the_call_goes_on(one: Echo) -> None:
    future = one.sleep_then.call_one(1.0, "slept")
    with pytest.raises(TimeoutError):
        future.get(timeout=0.2)  # raised, so it did not wait for the value
    assert future.get(timeout=30) == "slept"
    # Done: every later look gives the same value.
    assert future.get() == "slept"
    assert future.result() == "slept"
    assert future.exception() is None


def test_result_and_exception_wait_for_a_pending_future(one: Echo) -> None:
    later: Any = one.sleep_then.call_one(0.2, "later")
    assert later.result(timeout=30) == "later"
    failing: Any = one.fail.call_one("later")
    assert isinstance(failing.exception(timeout=30), ActorError)
    pending = one.sleep_then.call_one(0.2, "now")
    assert pending.exception() is None  # waits, then says there was no error
    assert pending.result() == "now"


def test_exception_gives_the_error_of_a_failed_call(one: Echo) -> None:
    future = one.fail.call_one("boom")
    with pytest.raises(ActorError):
        future.get(timeout=30)
    error = future.exception()
    assert isinstance(error, ActorError)
    assert isinstance(error.exception, ValueError)
    with pytest.raises(ActorError):
        future.result()


def test_a_negative_timeout_is_refused(one: Echo) -> None:
    with pytest.raises(ValueError, match="invalid timeout"):
        one.ping.call_one().get(timeout=-1)


def test_a_future_cannot_be_built_directly() -> None:
    build: Any = Future
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        build()
    with pytest.raises(TypeError, match="unexpected keyword argument 'coro'"):
        build(coro=None)


def test_futures_can_be_awaited_gathered_and_waited_for(echo: Echo, one: Echo) -> None:
    async def main() -> dict[str, Any]:
        whole = await echo.ping.call()
        single = await one.get_tag.call_one()
        both = await asyncio.gather(one.ping.call_one(), echo.rank.call())
        try:
            await asyncio.wait_for(one.sleep_then.call_one(2.0, "late"), timeout=0.1)
        except TimeoutError:
            timed_out = True
        else:
            timed_out = False
        return {"whole": whole.values(), "single": single, "both": both, "timed_out": timed_out}

    result = run(main())
    assert result["whole"] == ["pong"] * 4
    assert result["single"] == "echo"
    assert result["both"][0] == "pong"
    assert result["both"][1].values() == [0, 1, 2, 3]
    assert result["timed_out"] is True


def test_as_asyncio_gives_an_asyncio_future(one: Echo) -> None:
    async def main() -> str:
        future: Any = one.get_tag.call_one()
        converted = future.as_asyncio()
        assert isinstance(converted, asyncio.Future)
        tag: str = await converted
        return tag

    assert run(main()) == "echo"


def test_stream_yields_futures_in_the_order_results_arrive(echo: Echo) -> None:
    pair = echo.slice(nodes=0)
    futures = list(pair.sleep_by_rank.stream([3.0, 0.0]))  # far apart even when loaded
    assert len(futures) == 2
    assert all(isinstance(f, Future) for f in futures)
    assert [f.get(timeout=30) for f in futures] == [1, 0]


def test_stream_items_of_a_failing_endpoint_raise_actor_error(echo: Echo) -> None:
    outcomes = []
    for future in echo.fail.stream("streamed"):
        try:
            future.get(timeout=30)
        except ActorError as error:
            outcomes.append(error.exception)
    assert [type(e) for e in outcomes] == [ValueError] * 4
    assert [str(e) for e in outcomes] == ["streamed"] * 4


def test_stream_futures_can_be_awaited(echo: Echo) -> None:
    async def main() -> list[int]:
        return sorted([await future for future in echo.rank.stream()])

    assert run(main()) == [0, 1, 2, 3]


def test_an_endpoint_error_arrives_as_actor_error_and_the_actor_lives_on(
    procs: ProcMesh,
) -> None:
    counter = procs.spawn("counter", Echo).slice(nodes=1, gpus=1)
    assert counter.inc.call_one().get(timeout=30) == 1
    with pytest.raises(ActorError) as caught:
        counter.fail.call_one("boom!").get(timeout=30)
    error = caught.value
    assert isinstance(error.exception, ValueError)
    assert str(error.exception) == "boom!"
    assert error.message == "Actor call counter.fail failed."
    assert "boom!" in error.exception_formatted
    assert "in fail" in error.exception_formatted  # the remote frame of the endpoint
    assert "boom!" in str(error)
    # The actor is alive and kept its state.
    assert counter.inc.call_one().get(timeout=30) == 2


def test_a_failing_call_to_many_actors_raises_actor_error(echo: Echo) -> None:
    with pytest.raises(ActorError) as caught:
        echo.fail.call("everyone").get(timeout=30)
    assert isinstance(caught.value.exception, ValueError)


def test_an_actor_error_can_be_built_from_an_exception() -> None:
    build: Any = ActorError
    cause = ValueError("x")
    error = build(cause)
    assert error.exception is cause
    assert error.message == "A remote actor call has failed."
    assert build(cause, "custom").message == "custom"


def test_returns_future_turns_a_coroutine_function_into_a_future() -> None:
    @returns_future
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    @returns_future
    async def broken() -> None:
        raise KeyError("broken")

    future = double(21)
    assert isinstance(future, Future)
    assert future.get(timeout=30) == 42
    with pytest.raises(KeyError):
        broken().get(timeout=30)

    async def main() -> int:
        return await double(5)

    assert run(main()) == 10


# -- returns_future: the body runs where its Future is first observed -------------------


@pytest.mark.timeout(30)
def test_a_returns_future_body_runs_once_for_its_first_observer() -> None:
    runs: list[int] = []

    @returns_future
    async def count() -> int:
        runs.append(1)
        return len(runs)

    future = count()
    assert runs == []  # the call starts nothing
    assert future.get(timeout=10) == 1
    assert future.get(timeout=10) == 1
    assert run(_awaited(future)) == 1
    assert runs == [1]


@pytest.mark.timeout(30)
def test_a_returns_future_dropped_unobserved_runs_none_of_its_body() -> None:
    runs: list[int] = []

    @returns_future
    async def count() -> int:
        runs.append(1)
        return 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        count()
        gc.collect()
        cancelled = count()
        assert cancelled.cancel()
        del cancelled
        gc.collect()
    assert runs == []
    assert not [w for w in caught if "never awaited" in str(w.message)]


@pytest.mark.timeout(30)
def test_returns_future_get_runs_the_body_on_the_calling_threads_own_loop() -> None:
    leftover: list[str] = []

    @returns_future
    async def where() -> tuple[int, asyncio.AbstractEventLoop]:
        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                leftover.append("cancelled")
                raise

        task = asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)
        assert not task.done()
        return threading.get_ident(), asyncio.get_running_loop()

    ident, loop = where().get(timeout=10)
    assert ident == threading.get_ident()
    assert leftover == ["cancelled"]  # tasks it left were ended before get() returned
    assert not loop.is_closed()
    assert where().get(timeout=10)[1] is loop  # the thread's loop is reused


@pytest.mark.timeout(30)
def test_a_returns_future_body_sees_the_context_of_its_call() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    @returns_future
    async def read_and_write() -> str:
        seen = var.get()
        var.set("body")
        return seen

    token = var.set("caller")
    try:
        future = read_and_write()
        var.set("after the call")
        assert future.get(timeout=10) == "caller"
        assert var.get() == "after the call"  # the body's write stays in its copy
    finally:
        var.reset(token)


@pytest.mark.timeout(30)
def test_returns_future_get_timeout_cancels_the_body_before_raising() -> None:
    cleaned: list[int] = []

    @returns_future
    async def blocks() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(1)

    future = blocks()
    with pytest.raises(TimeoutError):
        future.get(timeout=0.05)
    assert cleaned == [1]
    with pytest.raises(TimeoutError):  # the outcome of every later observer
        future.get()


@pytest.mark.timeout(30)
def test_other_observers_of_a_returns_future_wait_without_touching_the_body() -> None:
    started, gate = threading.Event(), threading.Event()

    @returns_future
    async def waits() -> int:
        started.set()
        await asyncio.to_thread(gate.wait, 10)
        return 9

    future = waits()
    box: dict[str, Any] = {}
    owner = threading.Thread(target=lambda: box.update(value=future.get(timeout=10)))
    owner.start()
    assert started.wait(10)
    with pytest.raises(TimeoutError):
        future.get(timeout=0.05)
    with pytest.raises(TimeoutError):
        run(asyncio.wait_for(_awaited(future), 0.05))  # cancels only that await
    gate.set()
    owner.join(10)
    assert box["value"] == 9
    assert future.get(timeout=10) == 9
    assert run(_awaited(future)) == 9


@pytest.mark.timeout(30)
def test_a_threads_returns_future_loop_shuts_down_when_the_thread_exits() -> None:
    closed: list[str] = []

    async def numbers() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            closed.append("generator")

    kept: list[Any] = []

    @returns_future
    async def leaves_a_generator() -> asyncio.AbstractEventLoop:
        generator = numbers()
        kept.append(generator)
        await generator.__anext__()
        await asyncio.to_thread(int)  # the loop's default executor is shut down too
        return asyncio.get_running_loop()

    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(loop=leaves_a_generator().get(10)))
    worker.start()
    worker.join(10)
    assert box["loop"].is_closed()
    assert closed == ["generator"]


@pytest.mark.timeout(30)
def test_awaiting_a_returns_future_runs_it_on_the_awaiting_loop_and_holds_its_task() -> None:
    tasks: list[weakref.ref[asyncio.Task[Any]]] = []
    release = asyncio.Event()

    @returns_future
    async def parks() -> asyncio.AbstractEventLoop:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(weakref.ref(task))
        await release.wait()
        return asyncio.get_running_loop()

    async def main() -> bool:
        future = parks()
        observer = future.as_asyncio()
        await asyncio.sleep(0)
        observer.cancel()  # cancels this observer only
        del observer
        gc.collect()
        assert tasks[0]() is not None  # the body's task is held while it runs
        release.set()
        loop = await future
        return loop is asyncio.get_running_loop()

    assert run(main()) is True


@pytest.mark.timeout(30)
def test_returns_future_get_inside_a_running_loop_runs_on_a_helper_thread() -> None:
    @returns_future
    async def where() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    async def main() -> int:
        return where().get(timeout=10)

    assert run(main()) != threading.get_ident()


@pytest.mark.timeout(30)
def test_returns_future_get_on_the_loop_running_its_body_raises() -> None:
    @returns_future
    async def parks() -> int:
        await asyncio.sleep(0.05)
        return 1

    async def main() -> int:
        future = parks()
        observer = future.as_asyncio()  # started on this loop
        with pytest.raises(RuntimeError, match="would deadlock"):
            future.get(timeout=10)
        value: int = await observer
        return value

    assert run(main()) == 1


@pytest.mark.timeout(30)
def test_a_callback_off_any_loop_runs_a_returns_future_body() -> None:
    @returns_future
    async def where() -> int:
        return threading.get_ident()

    future = where()
    seen: list[int] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    assert future.get(timeout=10) not in (threading.get_ident(), None)
    assert seen == [future.get()]


@pytest.mark.timeout(60)
def test_a_returns_future_body_awaits_calls_to_actors(echo: Echo, one: Echo) -> None:
    @returns_future
    async def ask() -> tuple[str, list[int]]:
        tag = await one.get_tag.call_one()
        ranks = await echo.rank.call()
        return tag, sorted(ranks.values())

    assert ask().get(timeout=30) == ("echo", [0, 1, 2, 3])
    assert run(_awaited(ask())) == ("echo", [0, 1, 2, 3])


def test_returns_future_refuses_a_plain_function() -> None:
    decorate: Any = returns_future
    with pytest.raises(TypeError, match="async function"):
        decorate(lambda: None)


async def _awaited(future: Future[Any]) -> Any:
    return await future
