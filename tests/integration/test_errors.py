"""Errors (issue 2, point 9): remote exceptions keep their type and say who raised them."""

from __future__ import annotations

import pickle
import threading

import pytest
from integration_actors import Echo, Oops, Recorder, Relay

from actormesh import ActorError, ActorMesh, ActorMeshError, ProcMesh, SerializationError
from actormesh.testing import run


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("failing", Echo)  # type: ignore[return-value]


def raised(future: object) -> ActorError:
    with pytest.raises(ActorError) as caught:
        future.get(timeout=30)  # type: ignore[attr-defined]
    return caught.value


def test_endpoint_exception_keeps_its_type_for_except_clauses(echo: ActorMesh[Echo]) -> None:
    async def main() -> str:
        try:
            await echo[1, 0].fail.call_one("bad input")
        except ValueError as error:  # the original type, not just ActorError
            return str(error)
        return "not raised"

    assert "bad input" in run(main())


def test_actor_error_carries_cause_message_traceback_and_origin(echo: ActorMesh[Echo]) -> None:
    error = raised(echo[1, 0].fail.call_one("bad input"))
    assert isinstance(error, ActorMeshError)
    assert isinstance(error.cause, ValueError)
    assert error.cause.args == ("bad input",)
    assert error.args == ("bad input",)
    assert error.cause_type == "ValueError"
    assert error.cause_message == "bad input"
    assert error.mesh == "failing"
    assert error.point == {"dp": 1, "tp": 0}
    assert error.endpoint == "fail"
    # The traceback was formatted where it was raised: it shows the endpoint's source.
    assert "integration_actors.py" in error.remote_traceback
    assert "raise ValueError(message)" in error.remote_traceback
    text = str(error)
    assert "ValueError: bad input" in text
    assert "endpoint 'fail' of mesh 'failing' at {dp=1, tp=0}" in text
    assert "Remote traceback" in text


def test_application_exception_fields_survive_from_a_def_endpoint(echo: ActorMesh[Echo]) -> None:
    error = raised(echo[0, 1].fail_sync.call_one("custom", 42))
    assert isinstance(error, Oops)
    assert error.code == 42
    assert isinstance(error.cause, Oops)
    assert error.endpoint == "fail_sync"


def test_call_over_the_mesh_fails_with_the_first_error(echo: ActorMesh[Echo]) -> None:
    error = raised(echo.fail.call("everyone fails"))
    assert isinstance(error, ValueError)
    assert error.mesh == "failing"


def test_error_passed_on_by_another_actor_keeps_the_original_type(
    procs: ProcMesh, echo: ActorMesh[Echo]
) -> None:
    relay = procs.spawn("passing_on", Relay)
    error = raised(relay[0, 0].relay_failure.call_one(echo[1, 1], "deep down"))
    assert isinstance(error, ValueError)
    assert (error.mesh, error.endpoint) == ("passing_on", "relay_failure")
    inner = error.cause
    assert isinstance(inner, ActorError)
    assert isinstance(inner, ValueError)
    assert (inner.mesh, inner.point, inner.endpoint) == ("failing", {"dp": 1, "tp": 1}, "fail")
    assert error.args == ("deep down",)


def test_actor_error_pickles_with_its_type_and_fields(echo: ActorMesh[Echo]) -> None:
    error = raised(echo[0, 0].fail.call_one("round trip"))
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ActorError)
    assert isinstance(copy, ValueError)
    assert (copy.mesh, copy.point, copy.endpoint) == ("failing", {"dp": 0, "tp": 0}, "fail")
    assert copy.remote_traceback == error.remote_traceback


def test_actor_stays_alive_and_keeps_its_state_after_an_error(procs: ProcMesh) -> None:
    echo = procs.spawn("survivor", Echo)
    pid = echo[1, 1].pid.call_one().get(timeout=30)
    echo[1, 1].set_value.call_one("kept").get(timeout=30)
    for _ in range(3):
        raised(echo[1, 1].fail.call_one("again"))
        raised(echo[1, 1].fail_sync.call_one("and again", 1))
    assert echo[1, 1].get_value.call_one().get(timeout=30) == "kept"
    assert echo[1, 1].pid.call_one().get(timeout=30) == pid


def test_unpicklable_argument_raises_at_the_call_site_and_sends_nothing(
    procs: ProcMesh,
) -> None:
    recorder = procs.spawn("unpicklable", Recorder)
    lock = threading.Lock()
    with pytest.raises(SerializationError, match=r"cannot pickle args\[0\].*lock") as caught:
        recorder.record.call(lock)
    assert isinstance(caught.value, TypeError)
    assert "nothing was sent" in str(caught.value)
    with pytest.raises(SerializationError, match=r"args\[0\]\['inner'\]\[1\]"):
        recorder.record.broadcast({"inner": [1, lock]})
    with pytest.raises(SerializationError, match=r"kwargs\['item'\]"):
        recorder[0, 0].record.call_one(item=lock)
    # Calls are handled in order, so had anything been sent it would show up here.
    assert list(recorder.recorded.call().get(timeout=30).values()) == [[]] * 4


def test_unpicklable_result_fails_the_call_not_the_actor(echo: ActorMesh[Echo]) -> None:
    error = raised(echo[0, 0].unpicklable_result.call_one())
    assert isinstance(error, SerializationError)
    assert "lock" in str(error)
    assert echo[0, 0].async_echo.call_one(1).get(timeout=30) == ("async", 1, "echo")


def test_an_actor_calling_a_mesh_whose_processes_were_stopped_hears_they_exited(
    procs: ProcMesh,
) -> None:
    from actormesh import ActorDiedError, proc_mesh

    relay = procs.spawn("stopped_target_caller", Relay)
    others = proc_mesh(gpus=1).get(timeout=30)
    target = others.spawn("short_lived", Echo)
    assert relay[0, 0].relay.call_one(target, 1).get(timeout=30)[1] == 1
    others.stop().get(timeout=30)
    error = raised(relay[0, 0].relay.call_one(target, 2))
    assert isinstance(error.cause, ActorDiedError)
    assert "it has exited: its mesh was stopped, or it died" in str(error)
