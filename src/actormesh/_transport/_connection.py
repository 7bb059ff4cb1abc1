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

import array
import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence

from ._frames import (
    PRIVATE,
    RETURNED,
    SHARED,
    Buffer,
    encode_header,
    header_size,
    nbytes,
    parse_lengths,
    parse_prefix,
)
from ._shm import SegmentShare, map_segment, pool
from ._speedups import frame_header, parse_inline, receive, send_buffers

__all__ = ["Connection", "TransportClosed"]

log = logging.getLogger("actormesh.transport")

_READ_CHUNK = 256 * 1024
_IOV_MAX = 512
_MAX_FDS = 64
# Plain ints: the socket module's enum members cost a Python-level call per operation.
_SOL_SOCKET = int(socket.SOL_SOCKET)
_SCM_RIGHTS = int(socket.SCM_RIGHTS)


class _ReadCallback(threading.local):
    """Per thread: whether a connection's read callback runs, and the connections that
    batched frames meanwhile. They leave when that callback ends (a burst of requests
    read at once gets its replies in one system call) rather than on the next loop turn,
    so a reply made while reading its request costs no extra turn."""

    def __init__(self) -> None:
        self.active = False
        self.dirty: list[Connection] = []


_callback = _ReadCallback()


# Received descriptors of segments mapped copy-on-write, on their way back to the sender.
_PRIVATE_FDS: set[int] = set()


def _keep_or_close(fd: int) -> None:
    """A received segment whose sender cannot take it back: reuse it here when it was
    ours alone, else close it."""
    if fd in _PRIVATE_FDS:
        _PRIVATE_FDS.discard(fd)
        os.close(fd)
    else:
        pool.give(fd)


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
        shm_threshold: parts at least this large go through shared memory (0: never).
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
        shm_threshold: int = 0,
        peer: str = "",
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self._on_frame = on_frame
        self._on_close = on_close
        self._max_frame = max_frame_bytes
        self._shm_threshold = shm_threshold
        self.peer = peer
        self._lock = threading.Lock()
        # Unsent bytes, in order; an entry's descriptors go with its first byte.
        self._backlog: deque[tuple[memoryview, list[int]]] = deque()
        self._fds: deque[int] = deque()
        self._returns: list[int] = []
        self._batch: list[Buffer] = []
        self._batch_bytes = 0
        self._flush_scheduled = False
        self._loop_thread: int | None = None
        self._lent: set[int] = set()  # inodes of our segments the peer holds
        # Reentrant: a finalizer run by the collector while it is held appends here too.
        self._returns_lock = threading.RLock()
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
        self._received = 0  # bytes read so far

    @property
    def closed(self) -> bool:
        """True once the connection is closed, from either side."""
        return self._closed

    @property
    def gone_with(self) -> str | None:
        """Once closed: why the process it led to is known to be gone with it (a way to
        a worker through its host agent, whose agent died: no other way reaches it);
        None: nothing is known (the process may still be reached another way)."""
        return None

    def fileno(self) -> int:
        """The socket's descriptor (to watch it for the peer hanging up; never read it)."""
        return self._fd

    def start(self) -> None:
        """Begin reading; call on the loop thread."""
        self._loop_thread = threading.get_ident()
        self._loop.add_reader(self._fd, self._on_readable)

    def move_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Be driven by ``loop`` from now on; call on its thread.

        The old loop must never run again (it is closed): its registrations are gone
        with it, and two loops reading one socket would tear frames apart.
        """
        with self._lock:
            self._loop = loop
            self._loop_thread = threading.get_ident()
            if self._closed:
                return
            loop.add_reader(self._fd, self._on_readable)
            if self._batch:  # its flush was scheduled on the old loop
                loop.call_soon(self._flush_batch)
            if self._backlog:
                self._writer_armed = True
                loop.add_writer(self._fd, self._on_writable)

    def read_ready(self) -> None:
        """Read what the socket has, as the loop would (for a thread that stands in for a
        blocked loop; never while the loop itself may read)."""
        self._on_readable()

    def read_remaining(self) -> None:
        """Deliver every frame already in the socket, now (loop thread).

        For a peer known to be dead (its process exit seen elsewhere, a pidfd say) before
        the loop read all it sent: what it said before dying is heard before its death.
        """
        while not self._closed:
            before = self._received
            self._on_readable()
            if self._received == before:
                return

    # -- sending ------------------------------------------------------------------------

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        """Send one frame made of ``parts``; callable from any thread.

        Parts of at least ``shm_threshold`` bytes are copied into shared memory before this
        returns; smaller ones must not change until flushed (a large frame may be flushed
        by the loop after this returns). ``share``: the same frame goes to other
        connections of this host with the same share, and its large parts are copied
        once for all of them. Raises ``TransportClosed`` when closed.
        """
        header, size, largest = frame_header(parts)
        threshold = self._shm_threshold
        if not threshold or largest < threshold:
            # All inline (every small message): no descriptors, nothing to copy.
            if threading.get_ident() == self._loop_thread:
                self._send_soon(header, parts, size)
            else:
                self._send_locked([header, *parts], [], size)
            return
        lengths = [nbytes(part) for part in parts]
        inline: list[Buffer] = []
        fds: list[int] = []
        inodes: set[int] = set()
        try:
            for index, part in enumerate(parts):
                size = lengths[index]
                if size < threshold:
                    inline.append(part)
                    continue
                if share is None:
                    fd, inode = pool.fill(part, size)
                    lengths[index] = size | SHARED
                else:
                    fd, inode = share.segment(index, part, size)
                    lengths[index] = size | SHARED | PRIVATE
                fds.append(fd)
                inodes.add(inode)
            header = encode_header(lengths)
            total = len(header) + sum(nbytes(part) for part in inline)
            with self._lock:
                self._lent |= inodes  # before the send: the peer may return them at once
            self._send_locked([header, *inline], fds, total)
        except BaseException:
            # Never sent: this receiver will not give them back (unless closing the
            # connection already forgot them).
            with self._lock:
                unsent = inodes & self._lent
                self._lent -= unsent
            pool.forget(unsent)
            raise
        finally:
            for fd in fds:  # the kernel holds its own reference while the frame is in flight
                os.close(fd)

    def _send_soon(self, header: bytes, inline: Sequence[Buffer], size: int) -> None:
        # On the loop thread, frames wait for the end of the loop turn and leave together
        # in one system call (replies to a burst of requests, say).
        with self._lock:
            if self._closed:
                raise TransportClosed(f"connection to {self.peer or 'peer'} is closed")
            self._batch.append(header)
            self._batch.extend(inline)
            self._batch_bytes += size
            if self._flush_scheduled:
                return
            self._flush_scheduled = True
        callback = _callback
        if callback.active:
            callback.dirty.append(self)
        else:
            self._loop.call_soon(self._flush_batch)

    def _flush_batch(self) -> None:
        with contextlib.suppress(TransportClosed):
            self._send_locked([], [], 0)

    def _send_locked(self, buffers: list[Buffer], fds: list[int], size: int) -> None:
        # ``size``: the bytes in ``buffers`` (known to the caller; summing again costs).
        with self._lock:
            self._send_held(buffers, fds, size)

    def _send_held(self, buffers: list[Buffer], fds: list[int], size: int) -> None:
        # ``_send_locked`` with the lock already held.
        if self._closed:
            raise TransportClosed(f"connection to {self.peer or 'peer'} is closed")
        if self._batch:
            # Frames batched on the loop thread go first: order per connection holds.
            buffers = [*self._batch, *buffers]
            size += self._batch_bytes
            self._batch = []
            self._batch_bytes = 0
        self._flush_scheduled = False
        if not buffers:
            return
        if self._backlog or len(buffers) >= _IOV_MAX:
            self._queue(buffers, 0, fds)
            return
        try:
            if fds:
                rights = [(_SOL_SOCKET, _SCM_RIGHTS, array.array("i", fds))]
                sent = self._sock.sendmsg(buffers, rights)
            else:
                sent = send_buffers(self._sock, self._sock.fileno(), buffers)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as error:
            self._fail_locked(error)
            raise TransportClosed(f"connection to {self.peer or 'peer'} broke: {error}") from error
        if sent < size:
            self._queue(buffers, sent, fds if sent == 0 else [])

    def _queue(self, buffers: Sequence[Buffer], skip: int, fds: list[int]) -> None:
        # Called with the lock held: append what was not sent and make the loop flush it.
        pending_fds = [os.dup(fd) for fd in fds]  # the caller closes the originals
        for part in buffers:
            view = memoryview(part)
            if view.format != "B" or view.ndim != 1:
                view = view.cast("B")
            if skip >= view.nbytes:
                skip -= view.nbytes
                continue
            self._backlog.append((view[skip:] if skip else view, pending_fds))
            pending_fds = []
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
                batch, rights = self._next_batch()
                try:
                    sent = self._sock.sendmsg(batch, rights)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as error:
                    self._fail_locked(error)
                    return
                if rights:
                    first, fds = self._backlog[0]
                    for fd in fds:
                        os.close(fd)
                    self._backlog[0] = (first, [])
                while sent:
                    head, fds = self._backlog[0]
                    if sent >= head.nbytes:
                        sent -= head.nbytes
                        self._backlog.popleft()
                    else:
                        self._backlog[0] = (head[sent:], fds)
                        sent = 0
            self._writer_armed = False
            self._loop.remove_writer(self._fd)

    def _next_batch(self) -> tuple[list[memoryview], list[tuple[int, int, bytes]]]:
        # Descriptors ride on the first byte of a sendmsg: a batch carries at most one
        # entry's descriptors, and only when that entry comes first.
        batch: list[memoryview] = []
        rights: list[tuple[int, int, bytes]] = []
        for index, (view, fds) in enumerate(self._backlog):
            if index >= _IOV_MAX or (fds and index > 0):
                break
            if fds:
                rights = [(_SOL_SOCKET, _SCM_RIGHTS, array.array("i", fds).tobytes())]
            batch.append(view)
        return batch, rights

    # -- receiving ----------------------------------------------------------------------

    def _on_readable(self) -> None:
        callback = _callback
        if callback.active:  # a frame handler that reads (never expected): no batching
            self._read_once()
            return
        callback.active = True
        try:
            self._read_once()
        finally:
            callback.active = False
            dirty = callback.dirty
            if dirty:
                callback.dirty = []
                for conn in dirty:
                    conn._flush_batch()

    def _read_once(self) -> None:
        # One recv per readiness event: a second one would mostly return EAGAIN, and on a
        # VM each system call costs microseconds. The reader is level-triggered, so data
        # left in the socket brings us back on the next loop turn.
        try:
            if self._big is not None:
                self._read_big()
                return
            if self._end == len(self._buf):
                self._compact()
            n = self._receive(self._view[self._end :])
            if n == 0:
                self._finish(None)
                return
            self._end += n
            self._parse()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._finish(error)
        except Exception as error:
            # A frame we cannot take apart leaves the stream in an unknown state: close it,
            # so that every caller waiting on this peer hears at once instead of hanging.
            log.exception("closing the connection to %s after a bad frame", self.peer)
            self._finish(error)

    def _receive(self, into: memoryview) -> int:
        # fileno() is -1 once closed: the read then fails (EBADF) rather than reaching a
        # descriptor number the process has reused.
        n, fds, truncated = receive(self._sock, self._sock.fileno(), into)
        self._received += n
        if fds:
            self._fds.extend(fds)
        if truncated:
            raise OSError("peer sent more file descriptors than fit; frame lost")
        return n

    def _read_big(self) -> None:
        # A large frame is read until the socket runs dry (BlockingIOError ends it in the
        # caller): one loop turn per kernel buffer would cost a wake-up per few MiB.
        while self._big is not None and self._big_view is not None:
            n = self._receive(self._big_view[self._big_filled :])
            if n == 0:
                self._finish(None)
                return
            self._big_filled += n
            if self._big_filled == len(self._big):
                view, lengths = self._big_view, self._big_lengths
                self._big = self._big_view = None
                self._deliver(view, lengths)

    def _parse(self) -> None:
        buf, view = self._buf, self._view
        while True:
            # Every frame of plain inline parts at once (the common case, compiled where
            # built); what stops it (descriptors, a large frame, a partial one) is below.
            frames, self._start = parse_inline(buf, self._start, self._end, self._max_frame)
            for parts in frames:
                self._on_frame(self, parts)
            available = self._end - self._start
            if available < 12:
                break
            nparts, body = parse_prefix(buf, self._start)
            if nparts & RETURNED:
                # The peer is done with segments we sent: they come back for reuse.
                count = nparts & ~RETURNED
                if available < header_size(count):
                    break
                self._start += header_size(count)
                for _ in range(count):
                    self._lent.discard(pool.give(self._fds.popleft()))
                continue
            if body > self._max_frame or nparts > 1 << 20:
                raise OSError(f"peer sent a frame of {body} bytes, over the limit")
            head = header_size(nparts)
            if available < head:
                break
            lengths = parse_lengths(buf, self._start, nparts)
            if sum(lengths) != body and sum(n for n in lengths if not n & SHARED) != body:
                raise OSError(f"peer sent a frame whose part lengths do not add up to {body}")
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

    def _release(self, fd: int) -> None:
        # A received segment is unused now. This may run on any thread, even inside a
        # send of this connection (a finalizer run by the garbage collector): so it is
        # returned from here only when the connection's lock is free, which rules that
        # out; else it is queued for the loop. The actor's thread that dropped a tensor
        # thus returns its segment itself, sparing the loop a wake-up per large message.
        if self._closed or self._loop.is_closed():
            _keep_or_close(fd)
            return
        with self._returns_lock:
            # Whoever finds the list empty flushes it (a finalizer that re-enters here
            # between the append and a length check would otherwise leave it unflushed).
            first = not self._returns
            self._returns.append(fd)
        if not first:
            return  # a flush is under way or scheduled: it takes this one too
        if threading.get_ident() != self._loop_thread and self._lock.acquire(blocking=False):
            try:
                self._flush_returns(held=True)
            finally:
                self._lock.release()
            return
        try:
            self._loop.call_soon_threadsafe(self._flush_returns)
        except RuntimeError:
            # The loop closed since the check above (the process is ending, and this may
            # be a finalizer, which must not raise): nobody will send them back.
            with self._returns_lock:
                fds, self._returns = self._returns, []
            for unsent in fds:
                _keep_or_close(unsent)

    def _release_private(self, fd: int) -> None:
        # Others map this segment too: its sender reuses it once all gave it back, so it
        # must never become this process' own (refilling it would change their copies).
        _PRIVATE_FDS.add(fd)
        self._release(fd)

    def _flush_returns(self, held: bool = False) -> None:
        # ``held``: the caller holds the connection's lock.
        with self._returns_lock:
            fds, self._returns = self._returns, []
        send = self._send_held if held else self._send_locked
        for start in range(0, len(fds), _MAX_FDS):
            batch = fds[start : start + _MAX_FDS]
            try:
                header = encode_header([SHARED] * len(batch), returned=True)
                send([header], batch, len(header))
            except TransportClosed:
                for fd in batch:
                    _keep_or_close(fd)
                continue
            for fd in batch:
                _PRIVATE_FDS.discard(fd)
                os.close(fd)

    def _deliver(self, body: memoryview, lengths: tuple[int, ...]) -> None:
        parts = []
        offset = 0
        for length in lengths:
            if length & PRIVATE:
                size = length & ~(SHARED | PRIVATE)
                fd = self._fds.popleft()
                parts.append(map_segment(fd, size, self._release_private, private=True))
            elif length & SHARED:
                parts.append(map_segment(self._fds.popleft(), length & ~SHARED, self._release))
            else:
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

    def close_orphaned(self) -> None:
        """Close now, on this thread: for a connection whose loop has closed (it runs
        nothing any more, so ``close()`` would leave the socket open)."""
        with self._lock:
            self._closed = True
        self._finish(None)

    def _fail_locked(self, error: BaseException) -> None:
        # The lock is held here, and _finish takes it: always defer to a later loop turn.
        self._closed = True
        if not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody to tell
                self._loop.call_soon_threadsafe(self._finish, error)

    def _call_on_loop(self, fn: Callable[..., None], *args: object) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            fn(*args)
        elif not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody to tell
                self._loop.call_soon_threadsafe(fn, *args)

    def _finish(self, error: BaseException | None) -> None:
        # Runs on the loop thread; tears down once and reports once.
        with self._lock:
            self._closed = True
            for _, fds in self._backlog:
                for fd in fds:
                    os.close(fd)
            self._backlog.clear()
            self._batch.clear()
            self._batch_bytes = 0
            while self._fds:
                os.close(self._fds.popleft())
            lent, self._lent = self._lent, set()
        pool.forget(lent)
        if self._close_reported:
            return
        self._close_reported = True
        for remove in (self._loop.remove_reader, self._loop.remove_writer):
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                remove(self._fd)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._on_close(self, error)
