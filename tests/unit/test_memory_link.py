"""The in-memory link (``_transport.MemoryLink``), and layer 2 run over it: a process'
runtime hosting actors, fed frames by a link that is not a socket, in this process."""

from __future__ import annotations

import asyncio
import contextvars
import pickle
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actormesh import Config
from actormesh._core import CoreRuntime, EndpointKind, dumps, headers, loads
from actormesh._transport import Link, MemoryLink, TransportClosed

pytestmark = pytest.mark.timeout(30)

WAIT = 10.0


class _LoopThread:
    """An event loop run by a thread of its own, as a process' runtime runs one."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the loop's thread; its value."""
        return asyncio.run_coroutine_threadsafe(_call(fn), self.loop).result(WAIT)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


async def _call(fn: Callable[[], Any]) -> Any:
    return fn()


class _Inbox:
    """The handlers of one end: what arrived, on which thread, and how it ended."""

    def __init__(self) -> None:
        self.frames: queue.Queue[tuple[list[bytes], str]] = queue.Queue()
        self.closes: queue.Queue[BaseException | None] = queue.Queue()

    def on_frame(self, link: Any, parts: list[memoryview]) -> None:
        assert all(isinstance(p, memoryview) for p in parts)
        self.frames.put(([bytes(p) for p in parts], threading.current_thread().name))

    def on_close(self, link: Any, error: BaseException | None) -> None:
        self.closes.put(error)

    def next(self) -> tuple[list[bytes], str]:
        return self.frames.get(timeout=WAIT)


@pytest.fixture
def ends() -> Iterator[tuple[MemoryLink, MemoryLink, _Inbox, _Inbox]]:
    left, right = _LoopThread("left"), _LoopThread("right")
    inbox_a, inbox_b = _Inbox(), _Inbox()
    a, b = MemoryLink.pair(
        (left.loop, inbox_a.on_frame, inbox_a.on_close),
        (right.loop, inbox_b.on_frame, inbox_b.on_close),
    )
    left.run(a.start)
    right.run(b.start)
    yield a, b, inbox_a, inbox_b
    a.close()
    left.stop()
    right.stop()


def test_a_memory_link_is_a_link() -> None:
    loop = asyncio.new_event_loop()
    try:
        end, _ = MemoryLink.pair((loop, print, print), (loop, print, print))
        link: Link = end  # what the layers above are typed against
        assert not link.closed and link.peer == "b"
    finally:
        loop.close()


def test_frames_arrive_whole_in_order_on_the_other_ends_loop(ends: Any) -> None:
    a, b, inbox_a, inbox_b = ends
    buffer = bytearray(b"reused")
    a.send([b"one", memoryview(buffer)])
    buffer[:] = b"CHANGE"  # the frame was copied when sent, as a socket copies it
    a.send([b"two"])
    b.send([b"back", b"", b"x" * 100_000])
    assert inbox_b.next() == ([b"one", b"reused"], "right")
    assert inbox_b.next() == ([b"two"], "right")
    assert inbox_a.next() == ([b"back", b"", b"x" * 100_000], "left")


def test_each_senders_frames_keep_their_order(ends: Any) -> None:
    a, _b, _inbox_a, inbox_b = ends

    def send(thread: int) -> None:
        for i in range(200):
            a.send([f"{thread}:{i}".encode()])

    threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    seen: dict[str, list[int]] = {}
    for _ in range(800):
        thread, i = inbox_b.next()[0][0].decode().split(":")
        seen.setdefault(thread, []).append(int(i))
    assert seen == {str(t): list(range(200)) for t in range(4)}


def test_closing_ends_both_sides_once_after_the_frames_sent_before(ends: Any) -> None:
    a, b, inbox_a, inbox_b = ends
    a.send([b"last"])
    a.close()
    a.close()  # again: nothing more
    assert inbox_b.next()[0] == [b"last"]
    assert inbox_a.closes.get(timeout=WAIT) is None
    assert inbox_b.closes.get(timeout=WAIT) is None
    assert a.closed and b.closed
    with pytest.raises(TransportClosed):
        b.send([b"too late"])
    with pytest.raises(TransportClosed):
        a.send([b"too late"])
    assert inbox_a.closes.empty() and inbox_b.closes.empty()


def test_frames_sent_before_the_receiver_starts_wait_for_it() -> None:
    loops = _LoopThread("a"), _LoopThread("b")
    inbox = _Inbox()
    try:
        a, b = MemoryLink.pair(
            (loops[0].loop, print, print), (loops[1].loop, inbox.on_frame, inbox.on_close)
        )
        a.send([b"early"])
        loops[1].run(lambda: None)  # the frame has reached b's loop, which waits
        assert inbox.frames.empty()
        loops[1].run(b.start)
        assert inbox.next()[0] == [b"early"]
    finally:
        for loop in loops:
            loop.stop()


def test_a_frame_larger_than_the_limit_is_refused_at_the_sender() -> None:
    loop = asyncio.new_event_loop()
    try:
        a, _ = MemoryLink.pair((loop, print, print), (loop, print, print), max_frame_bytes=8)
        with pytest.raises(ValueError, match="a frame of 9 bytes is larger than the link allows"):
            a.send([b"12345", b"6789"])
    finally:
        loop.close()


# -- layer 2 over a memory link --------------------------------------------------------


class Counter:
    """A hosted actor as the actor layer would give the runtime one (``_core.Hosted``)."""

    def __init__(self, start: int) -> None:
        self.context = contextvars.copy_context()
        self.value = start
        self.closed_with: list[BaseException | None] = []

    def kind(self, endpoint: str) -> EndpointKind:
        if endpoint not in ("add", "add_later", "boom"):
            raise AttributeError(f"no endpoint {endpoint!r}")
        return EndpointKind.ASYNC if endpoint == "add_later" else EndpointKind.SYNC

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if endpoint == "boom":
            raise KeyError("boom")
        if endpoint == "add_later":
            return self._add_later(*args)
        self.value += args[0]
        return self.value

    async def _add_later(self, amount: int) -> int:
        await asyncio.sleep(0)
        self.value += amount
        return self.value

    def close(self, error: BaseException | None, on_loop: Any) -> None:
        self.closed_with.append(error)


class CounterSpec:
    """What a SPAWN frame carries: each rank's factory, mesh name and point."""

    def __init__(self, start: int) -> None:
        self.start = start

    def actor(self, rank: int) -> tuple[Callable[[], Any], str, dict[str, int]]:
        return (lambda: Counter(self.start + rank)), "counters", {"gpus": rank}


@pytest.fixture
def hosting() -> Iterator[tuple[MemoryLink, _Inbox]]:
    """A runtime of layer 2 with nothing under it but one memory link to a caller."""
    worker, caller = _LoopThread("worker-loop"), _LoopThread("caller-loop")
    runtime = CoreRuntime(Config(), worker.loop, "memory-worker")
    runtime.loop_thread_id = worker.thread.ident
    inbox = _Inbox()
    mine, theirs = MemoryLink.pair(
        (caller.loop, inbox.on_frame, inbox.on_close),
        (worker.loop, runtime._on_frame, runtime._on_close),
        peers=("memory-worker", "caller"),
    )
    worker.run(theirs.start)
    caller.run(mine.start)
    try:
        yield mine, inbox
    finally:
        mine.close()
        worker.run(runtime._close_listener)
        worker.stop()
        caller.stop()


def _reply(inbox: _Inbox) -> tuple[headers.Reply, Any]:
    parts, _thread = inbox.next()
    reply = headers.read(headers.Reply, headers.decode(parts[0]))
    return reply, parts[1:]


def test_layer_two_hosts_actors_and_answers_calls_over_a_memory_link(hosting: Any) -> None:
    link, inbox = hosting
    data, buffers = dumps(CounterSpec(10))
    link.send([headers.encode(headers.Spawn(1, "counters-1", (0, 1))), data, *buffers])
    built = sorted(_reply(inbox)[0] for _ in range(2))
    assert built == [headers.Reply(1, 0, True), headers.Reply(1, 1, True)]

    args, _ = dumps(((5,), {}))
    link.send([headers.encode(headers.Call(2, "counters-1", (0, 1), "add")), args])
    answers = {}
    for _ in range(2):
        reply, parts = _reply(inbox)
        assert reply.req_id == 2 and reply.ok
        answers[reply.rank] = loads(parts[0])
    assert answers == {0: 15, 1: 16}

    link.send([headers.encode(headers.Call(3, "counters-1", (1,), "add_later")), args])
    reply, parts = _reply(inbox)
    assert (reply, loads(parts[0])) == (headers.Reply(3, 1, True), 21)


def test_layer_two_sends_an_actors_error_and_a_missing_actors_back(hosting: Any) -> None:
    link, inbox = hosting
    data, buffers = dumps(CounterSpec(0))
    link.send([headers.encode(headers.Spawn(1, "counters-2", (0,))), data, *buffers])
    assert _reply(inbox)[0] == headers.Reply(1, 0, True)
    args, _ = dumps(((), {}))
    link.send([headers.encode(headers.Call(2, "counters-2", (0, 7), "boom")), args])
    errors = {}
    for _ in range(2):
        reply, parts = _reply(inbox)
        assert not reply.ok
        errors[reply.rank] = pickle.loads(parts[0])
    assert errors[0]["type"] == "KeyError" and errors[0]["endpoint"] == "boom"
    assert "no live actor of rank 7" in errors[7]["message"]


def test_layer_two_stops_a_mesh_over_a_memory_link(hosting: Any) -> None:
    link, inbox = hosting
    data, buffers = dumps(CounterSpec(0))
    link.send([headers.encode(headers.Spawn(1, "counters-3", (0,))), data, *buffers])
    assert _reply(inbox)[0] == headers.Reply(1, 0, True)
    link.send([headers.encode(headers.StopMesh(2, "counters-3"))])
    assert _reply(inbox)[0] == headers.Reply(2, -1, True)
    args, _ = dumps(((1,), {}))
    link.send([headers.encode(headers.Call(3, "counters-3", (0,), "add")), args])
    reply, parts = _reply(inbox)
    assert not reply.ok and "no live actor" in pickle.loads(parts[0])["message"]
