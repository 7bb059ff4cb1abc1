"""A mailbox's actor thread and close hooks across construction: a construction that
fails ends the thread, an actor stopped while it was being built (its class' module
importing, its ``__init__`` running) has its close hooks run once it exists, and a build
that ends after the process' loop closed raises nothing. A real event loop in a thread;
the actor is a stand-in."""

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


@pytest.mark.parametrize("fails", [False, True], ids=["built", "init-raised"])
def test_a_build_that_ends_after_its_process_loop_closed_raises_nothing(fails: bool) -> None:
    # A process whose mesh is stopped while an actor is being built closes its loop; the
    # build's outcome then has nowhere to go, and must not end the actor's thread with
    # "RuntimeError: Event loop is closed" printed as an uncaught exception.
    loop = asyncio.new_event_loop()
    released, next_job = threading.Event(), threading.Event()
    escaped: list[BaseException | None] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    try:

        def late() -> StandIn:
            assert released.wait(10)
            if fails:
                raise RuntimeError("__init__ failed")
            return StandIn()

        mailbox = Mailbox(loop, "actor late")
        mailbox.construct(late, lambda error: None)
        loop.close()
        released.set()
        # The thread goes on to its next job (an uncaught error would have ended it).
        mailbox._jobs.put((next_job.set,))
        assert next_job.wait(10), "the actor's thread died"
        assert escaped == []
    finally:
        threading.excepthook = hook
