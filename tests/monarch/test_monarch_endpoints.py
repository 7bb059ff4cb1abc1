"""``endpoint`` and its options (``explicit_response_port``, ``propagate``),
``concurrent_endpoint``, ``as_endpoint``, ``Accumulator`` and the adverbs, as in Monarch 0.7."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from actormesh.actor import (
    Accumulator,
    Actor,
    ActorError,
    Future,
    ProcMesh,
    as_endpoint,
    concurrent_endpoint,
    endpoint,
    returns_future,
)
from actormesh.testing import run

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo, Engine, Gate, SyncCounter
else:
    from monarch_actors import Echo, Engine, Gate, SyncCounter


@pytest.fixture(scope="module")
def engine(procs: ProcMesh) -> Engine:
    return procs.spawn("engine", Engine)


def test_an_explicit_response_port_is_answered_later_from_another_thread(engine: Engine) -> None:
    one = engine.slice(nodes=1, gpus=1)
    request = one.infer.call_one()
    with pytest.raises(TimeoutError):
        request.get(timeout=0.2)  # nothing answered yet: the port waits in the actor
    assert one.update.call_one(42).get(timeout=30) == 1
    assert request.get(timeout=30) == 42


def test_an_explicit_response_port_answers_a_call_to_many_actors(engine: Engine) -> None:
    assert engine.infer_now.call(3).get(timeout=30).values() == [300] * 4
    assert engine.slice(nodes=0, gpus=1).infer_now.call_one(4).get(timeout=30) == 400


def test_an_error_sent_to_an_explicit_response_port_is_raised_as_it_is(engine: Engine) -> None:
    with pytest.raises(ValueError, match="bad 4") as caught:
        engine.slice(nodes=0, gpus=0).reject.call_one("bad 4").get(timeout=30)
    assert not isinstance(caught.value, ActorError)


def test_an_accumulator_folds_the_answers_of_every_actor(procs: ProcMesh) -> None:
    counters = procs.spawn("accumulated", Echo)
    total = Accumulator(counters.inc, 0, lambda acc, value: acc + value).accumulate(5)
    assert isinstance(total, Future)
    assert total.get(timeout=30) == 20
    nothing: list[int] = []
    collected = Accumulator(counters.rank, nothing, lambda acc, value: [*acc, value]).accumulate()
    assert sorted(collected.get(timeout=30)) == [0, 1, 2, 3]


def test_endpoint_options_of_the_tensor_engine_leave_calls_as_they_are(echo: Echo) -> None:
    assert echo.propagated.call(1).get(timeout=30).values() == [2] * 4
    assert echo.uninstrumented.call(1).get(timeout=30).values() == [3] * 4


def test_messages_to_an_actor_run_one_at_a_time(procs: ProcMesh) -> None:
    gate = procs.spawn("sequential", Gate).slice(nodes=0, gpus=0)
    waiting = gate.wait_open.call_one(0.5)
    opened = gate.open.call_one()
    # open() is only handled once wait_open() has returned, so wait_open() never sees it.
    assert waiting.get(timeout=30) is False
    assert opened.get(timeout=30) is None


def test_a_concurrent_endpoint_lets_later_messages_run(procs: ProcMesh) -> None:
    gate = procs.spawn("concurrent", Gate).slice(nodes=1, gpus=0)
    waiting = gate.wait_open_concurrently.call_one(30.0)
    assert gate.open.call_one().get(timeout=30) is None
    assert waiting.get(timeout=30) is True


def test_concurrent_endpoint_needs_an_async_method() -> None:
    with pytest.raises(ValueError, match="async"):

        class Wrong(Actor):
            @concurrent_endpoint
            def blocking(self) -> None:
                pass


def test_concurrent_endpoint_refuses_to_wrap_an_endpoint() -> None:
    with pytest.raises(ValueError, match="does not wrap @endpoint"):

        class Stacked(Actor):
            @concurrent_endpoint
            @endpoint
            async def ping(self) -> str:
                return "pong"


def test_an_endpoints_error_reads_as_monarchs(echo: Echo) -> None:
    with pytest.raises(ValueError) as caught:
        echo.slice(nodes=0, gpus=1).fail.call_one("no good").get(timeout=30)
    text = str(caught.value)
    assert text.startswith("Actor call echo.fail failed.\n"), text
    assert "ValueError: no good" in text


def test_as_endpoint_calls_a_plain_method(echo: Echo) -> None:
    plain = as_endpoint(echo.not_an_endpoint)
    assert plain.call(7).get(timeout=30).values() == [("plain", 7)] * 4
    assert as_endpoint(echo.slice(nodes=0, gpus=0).not_an_endpoint).call_one(8).get(timeout=30) == (
        "plain",
        8,
    )


def test_as_endpoint_needs_a_plain_method_of_a_spawned_actor(echo: Echo) -> None:
    with pytest.raises(ValueError, match="method of a spawned actor"):
        as_endpoint(echo.ping)


def test_sync_endpoints_run_without_an_event_loop(procs: ProcMesh) -> None:
    counters = procs.spawn("sync", SyncCounter)
    assert counters.has_running_loop.call().get(timeout=30).values() == [False] * 4
    assert counters.inc.call().get(timeout=30).values() == [1] * 4


def test_a_sync_endpoint_may_block_on_a_call_to_another_actor(procs: ProcMesh, echo: Echo) -> None:
    counters = procs.spawn("sync_asker", SyncCounter)
    assert counters.ask.call(echo.slice(nodes=1, gpus=1)).get(timeout=30).values() == ["pong"] * 4


def test_get_inside_an_async_endpoint_waits_for_the_value(procs: ProcMesh, echo: Echo) -> None:
    counter = procs.spawn("blocked_on", SyncCounter).slice(nodes=0, gpus=0)
    assert echo.slice(nodes=1, gpus=0).blocking_get.call_one(counter).get(timeout=30) == 1


def test_choose_calls_one_actor(procs: ProcMesh) -> None:
    counters = procs.spawn("chosen", Echo)
    assert counters.inc.choose(1).get(timeout=30) == 1
    assert sorted(counters.inc.call(0).get(timeout=30).values()) == [0, 0, 0, 1]


def test_broadcast_returns_none_and_keeps_the_senders_order(procs: ProcMesh) -> None:
    counters = procs.spawn("broadcast", Echo)
    broadcast: Any = counters.inc.broadcast
    assert broadcast() is None
    counters.slice(gpus=0).inc.broadcast()
    assert counters.inc.call(0).get(timeout=30).values() == [2, 1, 2, 1]


def test_calls_from_one_sender_are_handled_in_send_order(procs: ProcMesh) -> None:
    counter = procs.spawn("ordered", Echo).slice(nodes=0, gpus=1)
    futures = [counter.inc.call_one() for _ in range(500)]
    assert [f.get(timeout=30) for f in futures] == list(range(1, 501))


def test_endpoints_have_the_adverbs(echo: Echo) -> None:
    endpoint: Any = echo.ping
    for adverb in ("call", "call_one", "choose", "stream", "broadcast"):
        assert callable(getattr(endpoint, adverb)), adverb


# -- Accumulator over any stream of futures, folded when its future is observed ---------


class _Failed(Exception):
    pass


@returns_future
async def _value(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


class _Streaming:
    """Something with ``stream()``: a generator of futures, recording how far it went."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.events: list[Any] = []

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Future[Any]]:
        self.events.append(("stream", args, kwargs))

        def futures() -> Iterator[Future[Any]]:
            for value in self.values:
                self.events.append(("next", value))
                yield _value(value)

        return futures()


@pytest.mark.timeout(30)
def test_an_accumulator_folds_a_generator_of_futures_left_to_right() -> None:
    source = _Streaming([1, 2, 3])
    nothing: list[int] = []
    folded = Accumulator(source, nothing, lambda acc, value: [*acc, value]).accumulate("a", k=1)
    assert source.events == [("stream", ("a",), {"k": 1})]  # called now, folded later
    assert folded.get(timeout=10) == [1, 2, 3]
    assert (
        Accumulator(_Streaming([]), 42, lambda acc, value: acc + value).accumulate().get(timeout=10)
        == 42
    )


@pytest.mark.timeout(30)
def test_an_accumulator_stops_at_the_first_error_and_every_observer_gets_it() -> None:
    source = _Streaming([1, 2, 3])
    calls: list[tuple[int, int]] = []

    def combine(total: int, value: int) -> int:
        calls.append((total, value))
        if value == 2:
            raise _Failed("combine failed on 2")
        return total + value

    folded = Accumulator(source, 0, combine).accumulate()
    assert calls == []  # nothing folds before the future is observed
    with pytest.raises(_Failed, match="on 2") as first:
        folded.get(timeout=10)
    assert run(_awaited(folded, _Failed)) is first.value
    assert calls == [(0, 1), (1, 2)]
    assert source.events[1:] == [("next", 1), ("next", 2)]  # the stream was left there

    failing = _Streaming([1, _Failed("answer failed"), 3])
    with pytest.raises(_Failed, match="answer failed"):
        Accumulator(failing, 0, lambda acc, value: acc + value).accumulate().get(timeout=10)
    assert failing.events[-1] == ("next", failing.values[1])


def test_an_accumulator_whose_stream_fails_raises_at_the_call() -> None:
    class Broken:
        def stream(self) -> Iterator[Future[int]]:
            raise _Failed("no stream")

    with pytest.raises(_Failed, match="no stream"):
        Accumulator(Broken(), 0, lambda acc, value: acc + value).accumulate()


@pytest.mark.timeout(60)
def test_an_accumulator_can_be_awaited(procs: ProcMesh) -> None:
    counters = procs.spawn("accumulated_async", Echo)

    async def main() -> int:
        total: int = await Accumulator(counters.inc, 0, lambda a, v: a + v).accumulate(2)
        return total

    assert run(main()) == 8


async def _awaited(future: Future[Any], error: type[BaseException]) -> BaseException:
    with pytest.raises(error) as caught:
        await future
    return caught.value
