"""A framed, bidirectional connection over a stream socket, driven by an event loop.

Reading happens on the loop thread (``add_reader``); a frame's parts reach ``on_frame`` as
writable memoryviews over one buffer per frame, so large out-of-band buffers are received
straight into their final memory. Sending is thread-safe and done by the caller's thread:
the common case is one ``sendmsg`` system call with no thread hop; only when the kernel
buffer is full does the remainder wait for the loop to flush it, in order.

Resources: ``close()`` removes the loop callbacks and closes the socket; ``on_close`` is
called exactly once, on the loop thread, whoever closed it (us, the peer, or an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence

from ._frames import Buffer, encode_header, header_size, nbytes, parse_lengths, parse_prefix

__all__ = ["Connection", "TransportClosed"]

_READ_CHUNK = 256 * 1024
_IOV_MAX = 512


class TransportClosed(ConnectionError):
    """The connection is closed (by this side or the peer); nothing more can be sent."""


FrameHandler = Callable[["Connection", list[memoryview]], None]
CloseHandler = Callable[["Connection", BaseException | None], None]


class Connection:
    """One end of a framed stream; see the module docstring for the threading contract.

    Args:
        sock: a connected stream socket; it is made non-blocking and owned from now on.
        loop: the loop that reads and flushes; ``start()`` must run on its thread.
        on_frame: called on the loop thread with each complete frame's parts.
        on_close: called once on the loop thread when the connection ends, with the error
            that ended it (``None`` for an orderly close or EOF).
        max_frame_bytes: a peer announcing a larger frame is a protocol error.
        peer: a label for messages and logs.
    """

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_frame: FrameHandler,
        on_close: CloseHandler,
        *,
        max_frame_bytes: int,
        peer: str = "",
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self._on_frame = on_frame
        self._on_close = on_close
        self._max_frame = max_frame_bytes
        self.peer = peer
        self._lock = threading.Lock()
        self._backlog: deque[memoryview] = deque()
        self._writer_armed = False
        self._closed = False
        self._close_reported = False
        self._buf = bytearray(_READ_CHUNK)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        # A frame too large for the read buffer is received straight into its own buffer.
        self._big: bytearray | None = None
        self._big_view: memoryview | None = None
        self._big_filled = 0
        self._big_lengths: tuple[int, ...] = ()

    @property
    def closed(self) -> bool:
        """True once the connection is closed, from either side."""
        return self._closed

    def start(self) -> None:
        """Begin reading; call on the loop thread."""
        self._loop.add_reader(self._fd, self._on_readable)

    # -- sending ------------------------------------------------------------------------

    def send(self, parts: Sequence[Buffer]) -> None:
        """Send one frame made of ``parts``; callable from any thread.

        The parts must not change until the frame is flushed (large frames may be flushed
        by the loop after this returns). Raises ``TransportClosed`` when closed.
        """
        lengths = [nbytes(p) for p in parts]
        header = encode_header(lengths)
        with self._lock:
            if self._closed:
                raise TransportClosed(f"connection to {self.peer or 'peer'} is closed")
            if self._backlog:
                self._queue(header, parts, 0)
                return
            try:
                sent = self._sock.sendmsg([header, *parts]) if len(parts) < _IOV_MAX else 0
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as error:
                self._fail_locked(error)
                raise TransportClosed(
                    f"connection to {self.peer or 'peer'} broke: {error}"
                ) from error
            if sent < len(header) + sum(lengths):
                self._queue(header, parts, sent)

    def _queue(self, header: bytes, parts: Sequence[Buffer], skip: int) -> None:
        # Called with the lock held: append what was not sent and make the loop flush it.
        for part in (header, *parts):
            view = memoryview(part).cast("B") if not isinstance(part, bytes) else memoryview(part)
            if skip >= view.nbytes:
                skip -= view.nbytes
                continue
            self._backlog.append(view[skip:] if skip else view)
            skip = 0
        if not self._writer_armed:
            self._writer_armed = True
            self._loop.call_soon_threadsafe(self._arm_writer)

    def _arm_writer(self) -> None:
        if not self._closed:
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        with self._lock:
            while self._backlog:
                batch = [self._backlog[i] for i in range(min(len(self._backlog), _IOV_MAX))]
                try:
                    sent = self._sock.sendmsg(batch)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as error:
                    self._fail_locked(error)
                    return
                while sent:
                    head = self._backlog[0]
                    if sent >= head.nbytes:
                        sent -= head.nbytes
                        self._backlog.popleft()
                    else:
                        self._backlog[0] = head[sent:]
                        sent = 0
            self._writer_armed = False
            self._loop.remove_writer(self._fd)

    # -- receiving ----------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            while not self._closed:
                if self._big is not None:
                    if not self._read_big():
                        return
                    continue
                if self._end == len(self._buf):
                    self._compact()
                n = self._sock.recv_into(self._view[self._end :])
                if n == 0:
                    self._finish(None)
                    return
                self._end += n
                self._parse()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._finish(error)

    def _read_big(self) -> bool:
        assert self._big is not None and self._big_view is not None
        n = self._sock.recv_into(self._big_view[self._big_filled :])
        if n == 0:
            self._finish(None)
            return False
        self._big_filled += n
        if self._big_filled == len(self._big):
            view, lengths = self._big_view, self._big_lengths
            self._big = self._big_view = None
            self._deliver(view, lengths)
        return True

    def _parse(self) -> None:
        buf, view = self._buf, self._view
        while True:
            available = self._end - self._start
            if available < 12:
                break
            nparts, body = parse_prefix(buf, self._start)
            if body > self._max_frame or nparts > 1 << 20:
                raise OSError(f"peer sent a frame of {body} bytes, over the limit")
            head = header_size(nparts)
            if available < head:
                break
            lengths = parse_lengths(buf, self._start, nparts)
            body_start = self._start + head
            if available >= head + body:
                # Copy the body out of the shared read buffer: the parts stay valid (and
                # writable, for tensors built over them) after the buffer is reused.
                body_view = memoryview(bytearray(view[body_start : body_start + body]))
                self._start = body_start + body
                self._deliver(body_view, lengths)
                continue
            if head + body > len(buf):
                big = bytearray(body)
                have = self._end - body_start
                big[:have] = view[body_start : self._end]
                self._big, self._big_view = big, memoryview(big)
                self._big_filled, self._big_lengths = have, lengths
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _compact(self) -> None:
        remaining = self._end - self._start
        self._buf[:remaining] = self._view[self._start : self._end]
        self._start, self._end = 0, remaining

    def _deliver(self, body: memoryview, lengths: tuple[int, ...]) -> None:
        parts = []
        offset = 0
        for length in lengths:
            parts.append(body[offset : offset + length])
            offset += length
        self._on_frame(self, parts)

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Close from this side; safe from any thread and more than once."""
        with self._lock:
            already = self._closed
            self._closed = True
        if not already:
            self._call_on_loop(self._finish, None)

    def _fail_locked(self, error: BaseException) -> None:
        # The lock is held here, and _finish takes it: always defer to a later loop turn.
        self._closed = True
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._finish, error)

    def _call_on_loop(self, fn: Callable[..., None], *args: object) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            fn(*args)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    def _finish(self, error: BaseException | None) -> None:
        # Runs on the loop thread; tears down once and reports once.
        with self._lock:
            self._closed = True
            self._backlog.clear()
        if self._close_reported:
            return
        self._close_reported = True
        for remove in (self._loop.remove_reader, self._loop.remove_writer):
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                remove(self._fd)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._on_close(self, error)
