"""Timeouts say who had not answered and what each was doing; late replies are dropped."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import pytest
from faults_actors import SlowInit, Worker
from faults_support import run_program

from actormesh import ActorMesh, CallTimeoutError, ProcMesh, proc_mesh

SLEEP_S = 60.0  # calls that outlast any wait here (the mesh's stop ends them)


@pytest.fixture
def workers() -> Iterator[ActorMesh[Worker]]:
    procs: ProcMesh = proc_mesh(gpus=3).get(timeout=30)
    try:
        mesh = procs.spawn("slow", Worker)
        # Every actor up before a test's short waits: they time the calls, not a spawn.
        mesh.echo.call(0).get(timeout=30)
        yield mesh
    finally:
        procs.stop().get(timeout=30)


def test_get_with_a_timeout_names_the_silent_actors_and_their_stacks(
    workers: ActorMesh[Worker],
) -> None:
    workers.slice(gpus=0).sleep.call_one(SLEEP_S)
    workers.slice(gpus=2).asleep.call_one(SLEEP_S)
    started = time.monotonic()
    with pytest.raises(CallTimeoutError) as caught:
        workers.echo.call(1).get(timeout=0.3)
    # The timeout and an inspection of the processes, not the sleeps.
    assert time.monotonic() - started < SLEEP_S
    error = caught.value
    assert error.pending == (0, 2)
    message = str(error)
    assert "2 of 3 actor(s) had not answered" in message
    assert "{gpus=0}: the call to 'echo' is queued" in message
    assert "busy with 'sleep'" in message and "time.sleep(seconds)" in message
    assert "busy with 'asleep'" in message and "await asyncio.sleep(seconds)" in message
    assert "{gpus=1}" not in message  # it answered


def test_a_call_waiting_for_a_slow_init_says_so() -> None:
    procs = proc_mesh(gpus=1).get(timeout=30)
    try:
        loading = procs.spawn("loading", SlowInit, 10.0)
        with pytest.raises(CallTimeoutError) as caught:
            loading.echo.call_one(1).get(timeout=1.0)
        message = str(caught.value)
        assert "the call to 'echo' is queued" in message
        assert re.search(r"busy with '__init__' \(running for \d+\.\d s\)", message), message
        assert "time.sleep(seconds)" in message  # its stack, in __init__
    finally:
        procs.stop().get(timeout=30)


def test_a_running_endpoint_is_named_with_its_time_in_it(workers: ActorMesh[Worker]) -> None:
    with pytest.raises(CallTimeoutError) as caught:
        workers.slice(gpus=1).sleep.call_one(2).get(timeout=0.3)
    message = str(caught.value)
    assert re.search(r"\{gpus=1\}: running 'sleep' for \d+\.\d", message), message
    assert "faults_actors.py" in message


def test_a_process_whose_loop_is_blocked_is_said_to_be_blocked(
    workers: ActorMesh[Worker],
) -> None:
    with pytest.raises(CallTimeoutError, match="its event loop is blocked"):
        workers.slice(gpus=1).hold_gil.call_one(2.5).get(timeout=0.3)


def test_await_with_a_timeout_raises_the_same_error(workers: ActorMesh[Worker]) -> None:
    async def main() -> CallTimeoutError:
        with pytest.raises(CallTimeoutError) as caught:
            await workers.slice(gpus=0).asleep.call_one(5).wait(0.3)
        # asyncio's own wait_for works too; it cancels the call and raises TimeoutError.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(workers.slice(gpus=1).asleep.call_one(5), 0.3)
        return caught.value

    error = asyncio.run(main())
    assert "running 'asleep'" in str(error)


def test_a_stream_with_a_timeout_ends_with_the_error(workers: ActorMesh[Worker]) -> None:
    workers.slice(gpus=2).sleep.call_one(10)
    got, errors = [], []
    for future in workers.echo.stream("x").with_timeout(2.0):
        try:
            got.append(future.get(timeout=30))
        except CallTimeoutError as error:
            errors.append(error)
    assert got == ["x", "x"]
    assert len(errors) == 1 and errors[0].pending == (2,)


def test_a_late_reply_is_dropped_and_never_answers_another_call(
    workers: ActorMesh[Worker],
) -> None:
    one = workers.slice(gpus=0)
    late = one.sleep.call_one(0.4)
    with pytest.raises(CallTimeoutError):
        late.get(timeout=0.1)
    # The timed-out call still runs to its end; its late reply must answer no other call.
    # The actor runs its calls one at a time, in order, and replies in that order: once
    # the first echo has answered, the late reply has come (to its own future: a wait
    # that ran out leaves the call going).
    assert one.echo.call_one(0).get(timeout=10) == 0
    assert late.done() and late.get(timeout=0) == 0.4
    for value in range(1, 20):
        assert one.echo.call_one(value).get(timeout=10) == value
    assert one.echo.call_one("last").get(timeout=10) == "last"
    assert one.stats()[0]["in_flight"] == 0


def test_the_default_timeout_bounds_waits_without_their_own() -> None:
    result = run_program("default_timeout", env={"ACTORMESH_DEFAULT_TIMEOUT": "0.5"})
    assert "timed out after 0.5 s" in result["call"] and "running 'sleep'" in result["call"]
    assert result["call_s"] < 60  # the default timeout, not the 60 s call
    assert "timed out after 0.5 s" in result["stream"]
