"""One bulk transfer as a process holds it: its bytes, and the children it feeds.

See ``_bulk`` for the protocol. A ``Transfer`` keeps the transfer's parts in memory of
its own (a reserved shared-memory segment per large part), how much of the stream it
holds (``have``: a prefix, since it comes in order from one parent at a time), and a
``Child`` per host it forwards to, fed from those bytes within a window of
acknowledged chunks. It runs on its process' loop thread once started.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core import headers
from .._transport import Connection, TransportClosed, nbytes, segment_pool
from ._bulk_plan import children, piece

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Child", "Host", "Transfer", "WINDOW"]

log = logging.getLogger("actormesh.hosts")

Host = tuple[str, str]  # (address, host name)

# Chunks a parent sends beyond what a child acknowledged.
WINDOW = 16


@dataclass(eq=False)
class Child:
    """A host this process forwards a transfer to."""

    conn: Connection
    subtree: list[Host]
    sent: int = 0  # stream bytes sent
    acked: int = 0  # stream bytes it holds
    opened: bool = False  # its first acknowledgement (where it resumes) came
    done: bool = False  # it and its subtree hold everything
    heard: float = 0.0  # when it last acknowledged (loop time)


class Transfer:
    """One transfer as this process holds it: its bytes, where they come from, and
    the children it forwards them to (loop thread, once started)."""

    def __init__(
        self,
        runtime: Runtime,
        settle: Callable[[Transfer], None],
        ident: int,
        sizes: Sequence[int],
        chunk: int,
        fanout: int,
    ) -> None:
        self.runtime = runtime
        self._settle = settle  # told when something may have finished it
        self.ident = ident
        self.sizes = list(sizes)
        self.starts = list(itertools.accumulate([0, *self.sizes[:-1]]))
        self.total = sum(self.sizes)
        self.chunk = chunk
        self.fanout = fanout
        self.views: list[memoryview] = []
        self.inodes: list[int | None] = []  # each part's segment (None: in plain memory)
        for size in self.sizes:
            if size >= max(1, runtime.config.shm_threshold):
                view, inode = segment_pool.reserve(size)
                self.views.append(view)
                self.inodes.append(inode)
            else:
                self.views.append(memoryview(bytearray(size)))
                self.inodes.append(None)
        self.have = 0
        self.parent: Connection | None = None
        self.subtree: list[Host] = []
        self.children: dict[Connection, Child] = {}
        self.opening = 0  # children being dialled
        self.done = False  # this host and its subtree hold everything (reported up)
        self.delivered = False  # its cast went to the workers (always, for a sender)
        self.progressed = runtime.loop.time()  # when bytes last came in

    # -- the bytes --------------------------------------------------------------------------

    def fill(self, parts: Sequence[Any]) -> None:
        """The sender's copy: ``parts`` are the transfer's, whole."""
        for view, part in zip(self.views, parts, strict=True):
            source = part if isinstance(part, memoryview) else memoryview(part)
            view[:] = source.cast("B") if source.format != "B" or source.ndim != 1 else source
        self.have = self.total

    def receive(self, offset: int, data: memoryview) -> None:
        """A chunk at stream ``offset`` (== ``have``) came from the parent."""
        length = nbytes(data)
        if piece(self.starts, self.total, offset, length, offset + length) != length:
            raise ValueError(f"a bulk chunk of {length} bytes at {offset} crosses a part")
        view = data if data.format == "B" and data.ndim == 1 else data.cast("B")
        self.view_at(offset, length)[:] = view
        self.have += length
        self.progressed = self.runtime.loop.time()

    def view_at(self, offset: int, length: int) -> memoryview:
        """The bytes of the stream at ``offset`` (within one part)."""
        part = bisect.bisect_right(self.starts, offset) - 1
        local = offset - self.starts[part]
        return self.views[part][local : local + length]

    # -- forwarding -------------------------------------------------------------------------

    def start(self, parent: Connection | None, subtree: Sequence[Host], fanout: int = 0) -> None:
        """Begin forwarding to this host's children, ``fanout`` of them if given
        (loop thread)."""
        self.parent = parent
        self.subtree = list(subtree)  # this host first, then those it feeds, in preorder
        self.open(children(list(subtree[1:]), fanout or self.fanout))
        self.ack()

    def open(self, subtrees: list[list[Host]]) -> None:
        for subtree in subtrees:
            self.opening += 1
            self.runtime.loop.create_task(self._open(subtree))

    async def _open(self, subtree: list[Host]) -> None:
        address = subtree[0][0]
        runtime = self.runtime
        try:
            conn = runtime.known_connection(address)
            if conn is None:
                # Dialling and the handshake block: not on the loop.
                conn = await asyncio.to_thread(runtime.connection, address)
            conn.send([headers.encode(self._open_header(subtree))])
        except Exception as error:  # unreachable (ActorDiedError, TransportClosed, OSError)
            self.opening -= 1
            self._replace(subtree, f"cannot reach it: {error}")
            return
        self.opening -= 1
        if self.finished:
            return
        child = Child(conn, subtree, heard=runtime.loop.time())
        self.children[conn] = child
        if conn.closed:
            self.lost(conn, "its connection closed")

    def _open_header(self, subtree: list[Host]) -> headers.BulkOpen:
        return headers.BulkOpen(self.ident, self.sizes, self.chunk, self.fanout, subtree)

    def _replace(self, subtree: list[Host], why: str) -> None:
        """The head of ``subtree`` will not get the data from here: feed its children."""
        below = subtree[1:]
        log.warning(
            "bulk transfer %x: the host agent on %s (%s) %s; sending to the %d host(s) "
            "after it from here",
            self.ident,
            subtree[0][1],
            subtree[0][0],
            why,
            len(below),
        )
        self.open(children(below, self.fanout))
        self.check_done()

    def lost(self, conn: Connection, reason: str) -> None:
        """``conn`` closed: a child's (loop thread)."""
        child = self.children.pop(conn, None)
        if child is not None and not child.done:
            self._replace(child.subtree, f"is gone ({reason})")

    def on_ack(self, conn: Connection, have: int, done: bool) -> None:
        child = self.children.get(conn)
        if child is None:
            return
        if not child.opened:
            child.opened = True
            child.sent = have  # it resumes where it stands (an adopted child may hold some)
        child.acked = max(child.acked, have)
        child.done = done
        child.heard = self.runtime.loop.time()
        self.pump(child)
        self.check_done()

    def pump(self, child: Child) -> None:
        """Send ``child`` what it lacks of what is here, within the window."""
        if not child.opened:
            return
        window = WINDOW * self.chunk
        try:
            while child.sent < self.have and child.sent - child.acked < window:
                length = piece(self.starts, self.total, child.sent, self.chunk, self.have)
                header = headers.encode(headers.BulkData(self.ident, child.sent))
                child.conn.send([header, self.view_at(child.sent, length)])
                child.sent += length
        except TransportClosed:
            pass  # its loss is reported (lost) on the loop

    def pump_all(self) -> None:
        for child in list(self.children.values()):
            self.pump(child)

    def ack(self) -> None:
        """Tell the parent how much is here (and whether the subtree is done)."""
        if self.parent is not None:
            frame = [headers.encode(headers.BulkAck(self.ident, self.have, self.done))]
            with contextlib.suppress(TransportClosed):
                self.parent.send(frame)

    def check_done(self) -> None:
        if (
            not self.done
            and self.have == self.total
            and self.opening == 0
            and all(child.done for child in self.children.values())
        ):
            self.done = True
            self.ack()
        self._settle(self)

    def cut_stalled(self, now: float, stall: float) -> None:
        """Cut off children that lack bytes held here and acknowledged nothing for
        ``stall`` seconds (frozen, or the link to them cut): their children are fed
        from here instead (``lost``)."""
        for child in list(self.children.values()):
            if child.acked < self.have and now - child.heard > stall:
                log.warning(
                    "bulk transfer %x: the host agent on %s (%s) acknowledged nothing for "
                    "%.0f s; cutting it off",
                    self.ident,
                    child.subtree[0][1],
                    child.subtree[0][0],
                    now - child.heard,
                )
                child.conn.close()  # reported as lost, on the loop

    @property
    def finished(self) -> bool:
        return self.done and self.delivered

    def close(self) -> None:
        """Let the memory go (loop thread): the workers' loans keep their segments."""
        for view, inode in zip(self.views, self.inodes, strict=True):
            view.release()
            if inode is not None:
                segment_pool.release(inode)
        self.views = []
