"""Adverbs (issue 2, point 4): call, call_one, broadcast, stream, choose."""

from __future__ import annotations

import pickle
import time

import pytest
from integration_actors import Echo, Recorder, Sleeper

from actormesh import (
    ActorError,
    ActorMesh,
    Failure,
    Future,
    Point,
    ProcMesh,
    Shape,
    SupervisionError,
    ValueMesh,
)
from actormesh.testing import run, wait_until


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("echo", Echo)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def sleepers(procs: ProcMesh) -> ActorMesh[Sleeper]:
    return procs.spawn("sleepers", Sleeper)  # type: ignore[return-value]


# -- call ---------------------------------------------------------------------------------


def test_call_returns_a_value_mesh_over_the_mesh_shape(echo: ActorMesh[Echo]) -> None:
    values = run(echo.whoami.call())
    assert isinstance(values, ValueMesh)
    assert values.shape == Shape.from_dims(("dp", "tp"), (2, 2))
    assert len(values) == 4
    assert [v["rank"] for v in values.values()] == [0, 1, 2, 3]
    points = [point for point, _ in values.items()]
    assert points[2] == Point(("dp", "tp"), (2, 2), (1, 0))
    assert all(v["point"] == dict(p) for p, v in values.items())


def test_value_mesh_is_indexed_by_coordinates(echo: ActorMesh[Echo]) -> None:
    values = run(echo.whoami.call())
    assert values.item(dp=1, tp=0)["rank"] == 2
    assert values[1, 0]["rank"] == 2
    row = values[1, :]
    assert isinstance(row, ValueMesh)
    assert [v["rank"] for v in row.values()] == [2, 3]
    assert [v["rank"] for v in values.slice(tp=1).values()] == [1, 3]
    with pytest.raises(ValueError, match="needs a coordinate"):
        values.item(dp=1)
    with pytest.raises(IndexError):
        values[2, 0]


def test_value_mesh_pickles(echo: ActorMesh[Echo]) -> None:
    values = run(echo.async_echo.call("x"))
    copy = pickle.loads(pickle.dumps(values))
    assert copy == values
    assert copy.item(dp=0, tp=1) == ("async", "x", "echo")


def test_call_on_a_slice_has_the_slice_shape(echo: ActorMesh[Echo]) -> None:
    values = run(echo.slice(tp=1).whoami.call())
    assert (values.shape.labels, values.shape.sizes) == (("dp",), (2,))
    assert [v["rank"] for v in values.values()] == [1, 3]


def test_all_is_an_alias_of_call(echo: ActorMesh[Echo]) -> None:
    assert list(run(echo.async_echo.all(5)).values()) == [("async", 5, "echo")] * 4


# -- call_one -----------------------------------------------------------------------------


def test_call_one_on_a_singleton_slice_returns_the_plain_value(echo: ActorMesh[Echo]) -> None:
    assert run(echo.slice(dp=1, tp=1).whoami.call_one())["rank"] == 3
    assert run(echo[0, 1].async_echo.call_one(7)) == ("async", 7, "echo")


def test_call_one_on_a_bigger_mesh_is_a_clear_error(echo: ActorMesh[Echo]) -> None:
    with pytest.raises(ValueError, match=r"exactly one actor.*has 2 actors.*mesh\.slice\(dp=0\)"):
        echo.slice(tp=0).async_echo.call_one(1)
    with pytest.raises(ValueError, match="has 4 actors"):
        echo.async_echo.call_one(1)


# -- broadcast ----------------------------------------------------------------------------


def test_broadcast_reaches_every_actor_before_later_calls(procs: ProcMesh) -> None:
    recorder = procs.spawn("broadcast_target", Recorder)
    assert recorder.record.broadcast("hello") is None
    assert list(recorder.recorded.call().get(timeout=30).values()) == [["hello"]] * 4


def test_broadcast_failures_reach_the_failure_hook(
    procs: ProcMesh, failure_hook: list[Failure]
) -> None:
    echo = procs.spawn("broadcast_hook", Echo)
    echo.fail.broadcast("broadcast went wrong")
    wait_until(lambda: len(failure_hook) == 4, 10, "four broadcast failures")
    assert sorted(f.ranks[0] for f in failure_hook) == [0, 1, 2, 3]
    for failure in failure_hook:
        assert failure.kind == "broadcast"
        assert failure.mesh == "broadcast_hook"
        assert isinstance(failure.error, ActorError)
        assert isinstance(failure.error, ValueError)
        assert "broadcast went wrong" in str(failure.error)


def test_unhandled_broadcast_failure_is_printed_and_raised_by_the_next_call(
    procs: ProcMesh, capsys: pytest.CaptureFixture[str]
) -> None:
    echo = procs.spawn("broadcast_default", Echo)
    echo[1, 1].fail.broadcast("nobody handled this")
    printed: list[str] = []

    def reported() -> bool:
        printed.append(capsys.readouterr().err)
        return "nobody handled this" in "".join(printed)

    wait_until(reported, 10, "the failure to be printed")
    stderr = "".join(printed)
    assert "unhandled failure of mesh 'broadcast_default'" in stderr
    assert "ranks [3]" in stderr
    with pytest.raises(SupervisionError, match="nobody handled this") as caught:
        echo.async_echo.call(1)
    assert isinstance(caught.value.__cause__, ValueError)
    # The failed actor was dropped (as Monarch drops it): every call that includes it
    # raises, and the slices without it work.
    with pytest.raises(SupervisionError, match="nobody handled this"):
        echo.async_echo.call(2)
    assert len(echo.slice(dp=0).async_echo.call(1).get(timeout=30)) == 2


# -- stream -------------------------------------------------------------------------------


def test_stream_yields_futures_resolved_in_arrival_order(sleepers: ActorMesh[Sleeper]) -> None:
    stream = sleepers.nap.stream(0.3, only_rank=0)
    futures = list(stream)  # at once: one future per actor, none waited for yet
    assert len(futures) == 4 and all(isinstance(f, Future) for f in futures)
    values = [f.get(timeout=30) for f in futures]
    assert values[-1] == 0  # the slow rank 0 comes last, whoever it is
    assert sorted(values) == [0, 1, 2, 3]


def test_stream_values_in_arrival_order_with_async_for(sleepers: ActorMesh[Sleeper]) -> None:
    async def main() -> list[int]:
        return [value async for value in sleepers.nap.stream(0.3, only_rank=0)]

    values = run(main())
    assert values[-1] == 0 and sorted(values) == [0, 1, 2, 3]


def test_stream_first_result_does_not_wait_for_the_slowest(
    sleepers: ActorMesh[Sleeper],
) -> None:
    async def main() -> tuple[float, float]:
        start = time.monotonic()
        stream = sleepers.nap.stream(2.0, only_rank=3)
        iterator = aiter(stream)
        await anext(iterator)
        first = time.monotonic() - start
        async for _ in iterator:
            pass
        return first, time.monotonic() - start

    first, total = run(main())
    assert first < 1.5 and total >= 2.0


def test_stream_futures_are_awaitable(sleepers: ActorMesh[Sleeper]) -> None:
    async def main() -> list[int]:
        return [await future for future in sleepers.slice(dp=1).nap.stream(0.0)]

    assert sorted(run(main())) == [2, 3]


def test_stream_raises_an_endpoint_error_in_its_turn(echo: ActorMesh[Echo]) -> None:
    async def main() -> None:
        async for _ in echo.slice(dp=0, tp=0).fail.stream("streamed failure"):
            pass

    with pytest.raises(ValueError, match="streamed failure"):
        run(main())


# -- choose -------------------------------------------------------------------------------


def test_choose_sends_to_exactly_one_actor(procs: ProcMesh) -> None:
    recorder = procs.spawn("choose_target", Recorder)

    async def main() -> list[list[str]]:
        assert await recorder.record.choose("only once") is None
        return list((await recorder.recorded.call()).values())

    recorded = run(main())
    assert sorted(recorded) == [[], [], [], ["only once"]]


def test_choose_spreads_calls_that_are_in_flight_together(procs: ProcMesh) -> None:
    sleepers = procs.spawn("choose_spread", Sleeper)

    async def main() -> list[int]:
        futures = [sleepers.nap.choose(0.2) for _ in range(4)]
        return [await f for f in futures]

    ranks = run(main())
    assert len(set(ranks)) > 1
