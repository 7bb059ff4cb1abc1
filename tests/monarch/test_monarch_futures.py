"""``Future`` (``get``/``result``/``exception``, ``await``), ``stream``, ``ActorError`` and
``returns_future``, as in Monarch 0.7."""

from __future__ import annotations

import asyncio
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
