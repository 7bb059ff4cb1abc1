"""Debugger sessions passing through an owner that is not the controller.

A worker stopped at a breakpoint opens a connection to its owner (see
``actormesh._core._debugger``). When that owner is a host agent, or a worker whose actors
spawned meshes of their own, the session belongs to the controller further up: this
relay passes the worker's frames to the owner's own owner unchanged, and the lines typed
there back down, by session id. It also holds the worker's heartbeats while the session
is open (a breakpoint in an ``async`` endpoint blocks its loop), here and, through the
frames, at every owner above. The controller's end is ``actormesh._observe``.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from typing import Any

from .._core import headers, loads
from .._transport import Connection, TransportClosed

__all__ = ["DebugRelay", "SessionWatch"]

log = logging.getLogger("actormesh.debug")


class SessionWatch:
    """Hears when a debug session's connection ends (a ``ReplyHandler`` that is never
    answered: the runtime tells every pending handler of a lost connection)."""

    def __init__(self, conn: Connection, ended: Any) -> None:
        self.conn = conn
        self.ended = ended

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        return False

    def on_lost(self, conn: Connection, reason: str) -> bool:
        if conn is not self.conn:
            return False
        self.ended()
        return True


class DebugRelay:
    """Passes debugger sessions of this process' workers up to its owner (loop thread).

    Args:
        runtime: this process' runtime (``Runtime``), which has an owner.
    """

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._down: dict[str, tuple[Connection, str]] = {}  # session -> (worker conn, address)

    def on_frame(self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        """A DEBUG frame from the owner (a typed line) or from a worker (anything else)."""
        sid, op = headers.read(headers.Debug, header)
        owner = self.runtime._parent
        if conn is owner:
            target = self._down.get(sid)
            if target is not None:
                with contextlib.suppress(TransportClosed):
                    target[0].send(parts)
            return
        if owner is None:
            log.warning("a debugger session from %s, but no controller to show it", conn.peer)
            conn.close()
            return
        if op == "open" and sid not in self._down:
            address = str(loads(parts[1]).get("address", ""))
            self._down[sid] = (conn, address)
            self.runtime.children.debugging(address, True)
            self.runtime.register(SessionWatch(conn, lambda: self._ended(sid)))
        with contextlib.suppress(TransportClosed):
            owner.send(parts)
        if op == "close":
            self._ended(sid, tell=False)

    def _ended(self, sid: str, tell: bool = True) -> None:
        entry = self._down.pop(sid, None)
        if entry is None:
            return
        self.runtime.children.debugging(entry[1], False)
        owner = self.runtime._parent
        if tell and owner is not None:
            header = headers.encode(headers.Debug(sid, "close"))
            with contextlib.suppress(TransportClosed):
                owner.send([header, pickle.dumps({"why": "the session's connection closed"}, 5)])
