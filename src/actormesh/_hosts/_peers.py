"""A host agent's connections to the agents it relays to, in a tree of agents.

The controller tells an agent nothing about its children in advance: a ``TreeCast`` or a
``Route`` names the next agents by address, and the agent dials each on first use,
with the job's secret (the same handshake as any TCP connection of the job), while the
frames for it wait in order. So when an agent dies, the next frame its children need
comes from whichever live ancestor the controller routes through now, and that one
dials them: a re-attachment costs nothing until it is used.

A child never dials its parent: it answers on the connection a frame came on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from .._transport import Connection, TransportClosed

__all__ = ["Peers"]

log = logging.getLogger("actormesh.hosts")


class Peers:
    """Connections to other agents by their address (loop thread).

    Args:
        runtime: the agent's runtime (its ``connection`` dials with the job's secret).
        lost: called with an agent's address when its connection fails or closes.
    """

    def __init__(self, runtime: Any, lost: Callable[[str], None]) -> None:
        self._runtime = runtime
        self._lost = lost
        self._conns: dict[str, Connection] = {}
        self._waiting: dict[str, list[list[Any]]] = {}  # frames for agents being dialled

    def send(self, address: str, parts: list[Any]) -> None:
        """Send a frame to the agent at ``address``, dialling it first if need be."""
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            try:
                conn.send(parts)
            except TransportClosed:
                self.closed(conn)
            return
        queue = self._waiting.get(address)
        if queue is not None:
            queue.append(parts)
            return
        self._waiting[address] = [parts]
        self._runtime.loop.create_task(self._dial(address))

    def send_all(self, parts: list[Any]) -> None:
        """Send a frame to every agent connected now (none is dialled for it)."""
        for conn in list(self._conns.values()):
            with contextlib.suppress(TransportClosed):
                conn.send(parts)

    async def _dial(self, address: str) -> None:
        try:
            conn: Connection = await asyncio.to_thread(self._runtime.connection, address)
        except Exception as error:
            log.warning("cannot reach the host agent at %s: %s", address, error)
            self._waiting.pop(address, None)
            self._lost(address)
            return
        self._conns[address] = conn
        for parts in self._waiting.pop(address, []):
            with contextlib.suppress(TransportClosed):
                conn.send(parts)

    def address_of(self, conn: Connection) -> str | None:
        """The address of the agent at the other end of ``conn`` (``None``: no peer)."""
        for address, known in self._conns.items():
            if known is conn:
                return address
        return None

    def closed(self, conn: Connection) -> bool:
        """``conn`` closed: True if it was a peer's (whose loss is then reported)."""
        address = self.address_of(conn)
        if address is None:
            return False
        del self._conns[address]
        self._lost(address)
        return True

    def forget(self, address: str) -> None:
        """The controller says the agent at ``address`` is gone: hang up on it (a link
        cut half-open would otherwise keep us waiting for it)."""
        conn = self._conns.get(address)
        if conn is not None:
            conn.close()
            self.closed(conn)
