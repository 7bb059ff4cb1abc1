"""References (issue 2, point 8): meshes pickle, travel to actors, and are called directly."""

from __future__ import annotations

import json
import pickle
import threading

import pytest
from integration_actors import Echo, Relay

from actormesh import ActorMesh, ProcMesh
from actormesh._hosts import Runtime
from actormesh.testing import wait_until


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("referenced", Echo)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def relay(procs: ProcMesh) -> ActorMesh[Relay]:
    return procs.spawn("relay", Relay)  # type: ignore[return-value]


def test_a_mesh_and_its_slices_pickle_and_stay_callable(echo: ActorMesh[Echo]) -> None:
    for view in (echo, echo.slice(dp=1), echo[0, 1], echo.flatten("r")[2:]):
        copy = pickle.loads(pickle.dumps(view))
        assert copy.shape == view.shape
        assert copy.name == "referenced"
        expected = view.whoami.call().get(timeout=30)
        assert copy.whoami.call().get(timeout=30) == expected


@pytest.mark.parametrize("select", [lambda m: m, lambda m: m.slice(dp=1, tp=0)])
def test_an_actor_calls_a_mesh_it_was_given(
    echo: ActorMesh[Echo], relay: ActorMesh[Relay], select: object
) -> None:
    peer = select(echo)  # type: ignore[operator]
    target = peer if peer.size() == 1 else peer[1, 1]
    answer = relay[0, 0].relay.call_one(target, "hi").get(timeout=30)
    assert answer == ("async", "hi", "echo")


def test_actor_to_actor_calls_never_pass_through_the_controller(
    echo: ActorMesh[Echo], relay: ActorMesh[Relay], tmp_path: object
) -> None:
    """Freeze the controller's I/O thread; the relay's call to the echo still completes.

    The controller sends one call (sending needs no loop) and then cannot read anything:
    if actor-to-actor traffic were routed through it, the relay would never hear back.
    """
    mark = f"{tmp_path}/answered.json"
    frozen = threading.Event()
    released = threading.Event()

    def freeze() -> None:
        frozen.set()
        released.wait(30)

    runtime = Runtime.get()
    runtime.loop.call_soon_threadsafe(freeze)
    try:
        assert frozen.wait(10)
        future = relay[1, 0].relay.call_one(echo[0, 1], "direct", mark)
        # A control: a reply to the controller itself cannot be read while it is frozen.
        control = echo[0, 0].async_echo.call_one("control")
        wait_until(lambda: _exists(mark), 10, "the relay to hear from the echo")
        assert not control.done()
        assert not future.done()
    finally:
        released.set()
    with open(mark) as answer:
        assert json.load(answer) == ["async", "direct", "echo"]
    assert future.get(timeout=30) == ("async", "direct", "echo")
    assert control.get(timeout=30) == ("async", "control", "echo")


def _exists(path: str) -> bool:
    try:
        with open(path) as file:
            return bool(file.read())
    except OSError:
        return False
