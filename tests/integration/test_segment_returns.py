"""A received shared-memory segment goes back to its sender from the thread that dropped
it, without waiting for the receiver's event loop (which would cost that loop a wake-up
per large message): real connections over a Unix socket pair, one loop each."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import threading
from collections.abc import Iterator
from queue import SimpleQueue
from typing import Any

import pytest

from actormesh._transport import Connection
from actormesh._transport._shm import pool
from actormesh.testing import wait_until

pytestmark = pytest.mark.timeout(60)

MIB = 1 << 20


@pytest.fixture
def loops() -> Iterator[tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]]:
    started = [asyncio.new_event_loop() for _ in range(2)]
    threads = [threading.Thread(target=loop.run_forever, daemon=True) for loop in started]
    for thread in threads:
        thread.start()
    yield started[0], started[1]
    for loop, thread in zip(started, threads, strict=True):
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _connection(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, frames: SimpleQueue[Any]
) -> Connection:
    conn = Connection(
        sock,
        loop,
        lambda _conn, parts: frames.put(parts),
        lambda _conn, _error: None,
        max_frame_bytes=1 << 30,
        shm_threshold=64 * 1024,
        peer="segment test",
    )
    loop.call_soon_threadsafe(conn.start)
    return conn


def test_a_dropped_segment_returns_while_the_receivers_loop_is_busy(
    loops: tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop],
) -> None:
    sender_loop, receiver_loop = loops
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    received: SimpleQueue[Any] = SimpleQueue()
    release_loop = threading.Event()
    sender = _connection(sender_loop, ours, SimpleQueue())
    receiver = _connection(receiver_loop, theirs, received)
    try:
        sender.send([b"header", b"x" * MIB])
        parts = received.get(timeout=30)
        (inode,) = sender._lent
        assert bytes(parts[1][:4]) == b"xxxx"

        # The receiver's loop is stuck in a long callback (an endpoint's step, say).
        receiver_loop.call_soon_threadsafe(release_loop.wait, 30)
        del parts
        gc.collect()  # this thread drops the last view of the segment
        wait_until(lambda: inode not in sender._lent, 10, "the segment to come back")
        assert any(segment.inode == inode for segment in pool._idle)
    finally:
        release_loop.set()
        sender.close()
        receiver.close()


def test_a_segment_dropped_as_the_receivers_loop_closes_is_kept_without_raising() -> None:
    # The loop closes between _release's check and its call_soon_threadsafe (a finalizer
    # at interpreter exit, say): the segment must stay usable here and nothing may raise.
    loop = asyncio.new_event_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = _connection(loop, ours, SimpleQueue())
    fd = os.memfd_create("actormesh-test-segment", os.MFD_CLOEXEC)
    os.ftruncate(fd, MIB)
    inode = os.fstat(fd).st_ino
    try:
        loop.close()
        loop.is_closed = lambda: False  # type: ignore[method-assign]  # as seen at the check
        conn._lock.acquire()  # a send under way: the return must go through the loop
        try:
            conn._release(fd)
        finally:
            conn._lock.release()
        assert conn._returns == []
        assert any(segment.inode == inode for segment in pool._idle)
    finally:
        del loop.is_closed  # the loop's own again (its finalizer asks)
        conn._closed = True
        ours.close()
        theirs.close()
