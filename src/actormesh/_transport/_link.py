"""What the layers above need of a connection (``Link``), and an in-memory one.

The layers above the transport send frames on a link and get its frames and its end
through the two callbacks they gave when it was made; they never touch its socket.
``Connection`` is the real link (a stream socket, shared memory for large parts).
``MemoryLink`` joins two event loops of one process with no socket at all: each frame
is copied, as a socket would copy it, and handed to the other end's ``on_frame`` on
that end's loop, in the order sent. It exists for fast tests of the layers above the
transport and for simulations that run thousands of peers in a few processes; the
real-process tests remain the proof that the system works.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._connection import TransportClosed
from ._frames import Buffer
from ._shm import SegmentShare

__all__ = ["Link", "MemoryLink"]


class Link(Protocol):
    """One end of a framed, ordered, reliable link to a peer."""

    peer: str  # a label for messages and logs

    @property
    def closed(self) -> bool:
        """True once the link is closed, from either side."""
        ...

    def start(self) -> None:
        """Begin delivering received frames; call on the link's loop thread."""
        ...

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        """Send one frame, from any thread, in order with this thread's other sends.

        Raises:
            TransportClosed: the link is closed.
        """
        ...

    def close(self) -> None:
        """Close from this side; safe from any thread and more than once."""
        ...


FrameHandler = Callable[[Any, list[memoryview]], None]
CloseHandler = Callable[[Any, BaseException | None], None]


class MemoryLink:
    """One end of an in-memory link; make both with ``MemoryLink.pair``.

    Frames sent before the receiving end's ``start()`` wait for it, as bytes wait in a
    socket. ``share`` is accepted and ignored: every part is copied.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_frame: FrameHandler,
        on_close: CloseHandler,
        *,
        peer: str = "",
        max_frame_bytes: int | None = None,
    ) -> None:
        self.peer = peer
        self._loop = loop
        self._on_frame = on_frame
        self._on_close = on_close
        self._max_frame = max_frame_bytes
        self._other: MemoryLink | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._started = False
        self._waiting: list[list[memoryview]] = []  # arrived before start()
        self._close_reported = False

    @classmethod
    def pair(
        cls,
        a: tuple[asyncio.AbstractEventLoop, FrameHandler, CloseHandler],
        b: tuple[asyncio.AbstractEventLoop, FrameHandler, CloseHandler],
        *,
        peers: tuple[str, str] = ("b", "a"),
        max_frame_bytes: int | None = None,
    ) -> tuple[MemoryLink, MemoryLink]:
        """Two joined ends: ``a``'s on ``a``'s loop with ``a``'s handlers, and ``b``'s.

        ``peers``: the label of each end (who it talks to).
        """
        first = cls(*a, peer=peers[0], max_frame_bytes=max_frame_bytes)
        second = cls(*b, peer=peers[1], max_frame_bytes=max_frame_bytes)
        first._other, second._other = second, first
        return first, second

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        with self._lock:
            self._started = True
            waiting, self._waiting = self._waiting, []
        for parts in waiting:
            self._deliver(parts)

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        other = self._other
        if self._closed or other is None:
            raise TransportClosed(f"the link to {self.peer or 'its peer'} is closed")
        # One buffer per frame, parts as views over it: what a socket's reader gives.
        sizes = [memoryview(part).nbytes for part in parts]
        if self._max_frame is not None and sum(sizes) > self._max_frame:
            raise ValueError(
                f"a frame of {sum(sizes)} bytes is larger than the link allows ({self._max_frame})"
            )
        body = memoryview(b"".join(bytes(memoryview(part).cast("B")) for part in parts))
        views, offset = [], 0
        for size in sizes:
            views.append(body[offset : offset + size])
            offset += size
        # call_soon_threadsafe keeps the order of calls made from one thread.
        with contextlib.suppress(RuntimeError):  # its loop closed: the frame is lost
            other._loop.call_soon_threadsafe(other._arrived, views)

    def close(self) -> None:
        for end in (self, self._other):
            if end is None:
                continue
            with end._lock:
                end._closed = True
            # After the frames already on their way: a socket's EOF comes after its data.
            with contextlib.suppress(RuntimeError):
                end._loop.call_soon_threadsafe(end._report_close)

    def _arrived(self, parts: list[memoryview]) -> None:
        with self._lock:
            if not self._started:
                self._waiting.append(parts)
                return
        self._deliver(parts)

    def _deliver(self, parts: list[memoryview]) -> None:
        if not self._close_reported:
            self._on_frame(self, parts)

    def _report_close(self) -> None:
        if self._close_reported:
            return
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for parts in waiting:  # frames that arrived before start() still count
            self._on_frame(self, parts)
        self._close_reported = True
        self._on_close(self, None)
