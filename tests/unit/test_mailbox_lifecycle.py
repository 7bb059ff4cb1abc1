"""A mailbox's actor thread and close hooks across construction: a construction that
fails ends the thread, and an actor stopped while it was being built (its class' module
importing, its ``__init__`` running) has its close hooks run once it exists. A real event
loop in a thread; the actor is a stand-in."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from queue import SimpleQueue
from typing import Any

import pytest

from actormesh._core._mailbox import EndpointKind, Mailbox

pytestmark = pytest.mark.timeout(30)


class StandIn:
    """The part of a hosted actor a mailbox uses."""

    def __init__(self) -> None:
        self.context = contextvars.copy_context()
        self.closes = 0
        self.closed = threading.Event()

    def kind(self, endpoint: str) -> EndpointKind:
        return EndpointKind.SYNC

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return None

    def close(self, error: BaseException | None = None, on_loop: Any = None) -> None:
        self.closes += 1
        self.closed.set()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _on_loop(loop: asyncio.AbstractEventLoop, fn: Any) -> None:
    ran = threading.Event()

    def run() -> None:
        fn()
        ran.set()

    loop.call_soon_threadsafe(run)
    assert ran.wait(10)


def test_a_failed_construction_ends_the_actors_thread(loop: asyncio.AbstractEventLoop) -> None:
    outcome: SimpleQueue[BaseException | None] = SimpleQueue()

    def broken() -> StandIn:
        raise RuntimeError("boom")

    mailbox = Mailbox(loop, "actor broken")
    mailbox.construct(broken, outcome.put)
    assert isinstance(outcome.get(timeout=10), RuntimeError)
    mailbox._thread.join(10)
    assert not mailbox._thread.is_alive(), "the failed actor's thread was left waiting"


def test_an_actor_stopped_while_it_was_built_is_closed_once_it_exists(
    loop: asyncio.AbstractEventLoop,
) -> None:
    built = threading.Event()
    actor = StandIn()

    def slow() -> StandIn:
        assert built.wait(10)
        return actor

    outcome: SimpleQueue[BaseException | None] = SimpleQueue()
    mailbox = Mailbox(loop, "actor slow")
    mailbox.construct(slow, outcome.put)
    _on_loop(loop, mailbox.close)  # its mesh is stopped while __init__ runs
    built.set()
    assert actor.closed.wait(10), "the actor's close hooks never ran"
    mailbox._thread.join(10)
    assert not mailbox._thread.is_alive()
    assert actor.closes == 1
