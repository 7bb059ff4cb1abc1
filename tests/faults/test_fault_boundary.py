"""Bad input at the boundary: a clear error where the call is written, the mesh serving on."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_actors import BadReturns, HoldsALock, HttpError, Worker
from faults_support import run_program

import actormesh
from actormesh import (
    ActorError,
    ActorInitError,
    ActorMesh,
    EndpointNotFoundError,
    ProcMesh,
    SerializationError,
    proc_mesh,
)


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    mesh = proc_mesh(gpus=2).get(timeout=30)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture(scope="module")
def workers(procs: ProcMesh) -> ActorMesh[Worker]:
    return procs.spawn("boundary", Worker)


def still_serving(mesh: ActorMesh[Worker]) -> None:
    assert list(mesh.echo.call("ok").get(timeout=10).values()) == ["ok", "ok"]


def test_an_unknown_endpoint_is_refused_naming_the_known_ones(workers: ActorMesh[Worker]) -> None:
    with pytest.raises(EndpointNotFoundError, match="has no endpoint 'nope'") as caught:
        workers.nope  # noqa: B018
    assert "echo" in str(caught.value)
    still_serving(workers)


def test_a_method_not_marked_endpoint_is_refused(workers: ActorMesh[Worker]) -> None:
    with pytest.raises(EndpointNotFoundError, match="not annotated as an endpoint"):
        workers.helper.call()
    still_serving(workers)


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((1, 2, 3), {}, "takes 2 positional argument(s) but 3 were given"),
        ((), {}, "missing required argument(s) 'a'"),
        ((1,), {"c": 2}, "unexpected keyword argument(s) 'c'"),
        ((1,), {"a": 2}, "multiple values for argument(s) a"),
    ],
)
def test_wrong_arguments_fail_at_the_call_site_before_anything_is_sent(
    workers: ActorMesh[Worker], args: tuple[int, ...], kwargs: dict[str, int], words: str
) -> None:
    before = sum(s["completed"] + s["failed"] for s in workers.stats().values())
    with pytest.raises(TypeError) as caught:
        workers.add.call(*args, **kwargs)
    assert words in str(caught.value)
    assert "add(a: 'int', b: 'int' = 0)" in str(caught.value)
    assert sum(s["completed"] + s["failed"] for s in workers.stats().values()) == before
    assert list(workers.add.call(1, b=2).get(timeout=10).values()) == [3, 3]


def test_slices_out_of_range_and_unknown_dimensions_are_refused(
    workers: ActorMesh[Worker],
) -> None:
    with pytest.raises((IndexError, ValueError), match="gpus"):
        workers.slice(gpus=5)
    with pytest.raises((KeyError, ValueError), match="hosts"):
        workers.slice(hosts=0)
    still_serving(workers)


def test_call_one_on_many_actors_is_refused(workers: ActorMesh[Worker]) -> None:
    with pytest.raises(ValueError, match="exactly one actor"):
        workers.echo.call_one(1)
    still_serving(workers)


def test_an_unpicklable_argument_is_named_and_nothing_is_sent(workers: ActorMesh[Worker]) -> None:
    with pytest.raises(SerializationError, match=r"args\[0\]\['lock'\]"):
        workers.echo.call({"lock": threading.Lock()})
    still_serving(workers)


def test_an_actor_class_the_workers_cannot_load_fails_the_spawn(
    procs: ProcMesh, workers: ActorMesh[Worker], tmp_path: Path
) -> None:
    # A module only this process can import: the workers' sys.path does not have it.
    (tmp_path / "ghost_actors.py").write_text(
        "from actormesh import Actor, endpoint\n"
        "class Ghost(Actor):\n"
        "    @endpoint\n"
        "    def boo(self) -> str:\n"
        "        return 'boo'\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        ghost = importlib.import_module("ghost_actors")
        with pytest.raises(ActorInitError) as caught:
            procs.spawn("ghosts", ghost.Ghost).initialized.get(timeout=30)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ghost_actors", None)
    message = str(caught.value)
    assert "cannot load" in message and "ghost_actors" in message
    still_serving(workers)


def test_an_exception_that_cannot_be_unpickled_still_arrives_readable(procs: ProcMesh) -> None:
    mesh = procs.spawn("bad", BadReturns)
    with pytest.raises(ActorError) as caught:
        mesh.slice(gpus=0).raise_unpicklable.call_one().get(timeout=10)
    assert caught.value.cause is None
    assert caught.value.cause_type == "faults_actors.Unpicklable"
    assert "1-2" in str(caught.value)
    assert "could not be unpickled here" in str(caught.value)
    assert mesh.slice(gpus=0).ping.call_one().get(timeout=10) == "pong"


def _raised_by(procs: ProcMesh, endpoint: str, kind: type[BaseException]) -> Any:
    """What calling ``endpoint`` of a fresh ``BadReturns`` raises (it must be a ``kind``)."""
    mesh = procs.spawn(endpoint, BadReturns)
    with pytest.raises(kind) as caught:
        getattr(mesh.slice(gpus=0), endpoint).call_one().get(timeout=10)
    return caught.value


def test_an_exception_whose_init_takes_other_arguments_arrives_as_its_type(
    procs: ProcMesh,
) -> None:
    error = _raised_by(procs, "raise_http_error", HttpError)
    assert isinstance(error, ActorError)
    assert (error.status, error.url) == (503, "http://example/x")
    assert "503 for http://example/x" in str(error)


def test_an_exception_holding_what_cannot_be_pickled_arrives_without_it(
    procs: ProcMesh,
) -> None:
    cause = _raised_by(procs, "raise_holding_a_lock", HoldsALock).cause
    assert isinstance(cause, HoldsALock) and cause.code == 7 and not hasattr(cause, "lock")
    assert "could not be pickled: lock" in " ".join(cause.__notes__)


def test_a_result_that_cannot_be_pickled_fails_that_call_only(procs: ProcMesh) -> None:
    mesh = procs.spawn("lock", Worker)
    with pytest.raises(SerializationError, match="cannot pickle") as caught:
        mesh.slice(gpus=0).lock.call_one().get(timeout=10)
    assert isinstance(caught.value, ActorError) and caught.value.endpoint == "lock"
    assert mesh.slice(gpus=0).echo.call_one(2).get(timeout=10) == 2


def test_messages_over_the_size_limit_fail_at_the_sender() -> None:
    limit = 1 << 20
    result = run_program("too_large", str(limit), env={"ACTORMESH_MAX_MESSAGE_BYTES": str(limit)})
    assert "over the limit of 1048576 bytes" in result["argument"]
    assert "nothing was sent" in result["argument"]
    assert "value returned by endpoint 'big'" in result["result"]
    assert result["after"] == "pong"


def test_errors_keep_pickling(workers: ActorMesh[Worker]) -> None:
    # A failure record travels between processes: every error type must survive it.
    import pickle

    for error in (
        actormesh.ActorDiedError("x", reason="r", ranks=(1,), values={0: 1}),
        actormesh.CallTimeoutError("t", pending=(2,)),
        actormesh.MeshStoppedError("s"),
        actormesh.MessageTooLargeError("m"),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and again.__dict__ == error.__dict__
