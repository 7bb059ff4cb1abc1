"""A host agent's way to its owner through the agent above it, in a tree of agents.

In a tree of agents (``_tree``) the controller keeps a connection only to the agents it
reaches first. Every other agent is adopted by its parent agent once the tree is formed
(``HOST adopt_tree``, sent down the tree as ``spawn_tree`` is): it takes the connection
its parent dialled to relay to it as the way to its owner, and the controller hangs up
its own. From then on:

- what the agent sends its owner (replies to the owner's requests, its workers' exits,
  output and replies, heartbeat answers) goes up as an ``UP`` frame naming the agent;
  every agent above passes it on as it came, and the controller reads the frame as if
  the agent's own connection had carried it (``_routed``);
- what the owner sends the agent comes down the tree as a ``ROUTE`` to the agent itself
  (``TO_AGENT``), and is handled as the owner's: only such a frame may shut it down.

So the controller's connections grow with the fan-out, not with the hosts. When the
agent above dies, its connection closes and this agent is an orphan: what it sends the
owner waits here, in order, until the agent the controller names instead (the nearest
live ancestor, or the controller itself) adopts it. An orphan nobody adopts within twice
``Config.heartbeat_timeout`` ends: its owner is gone too, or gave it up. An agent that
ends for any other reason, or whose owner goes away, first tells the agents it adopted
(``HOST owner_gone``): each does what its owner's connection closing would have it do
(end, or detach if it holds a lease), so a controller's death empties a tree of any
depth at once, and a leased job's agents all detach at once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from .._core import headers
from .._transport import Buffer, Connection, SegmentShare, TransportClosed

__all__ = ["Uplink"]

log = logging.getLogger("actormesh.hosts")


class Uplink(Connection):
    """The agent's owner, reached through the agent above it (see the module docstring).

    It stands where the owner's connection would (``Runtime.adopt_owner``): the frames
    the owner sends through the tree are handled as if they came on it, and what is sent
    on it goes up wrapped in an ``UP`` naming this agent. It owns no socket (``raw``, the
    connection from the agent above, carries everything) and reads nothing.

    Args:
        loop: the agent's loop.
        origin: this agent's address in the tree (the controller knows it by it).
        end: ends the agent, with why (an orphan that nobody adopted in time).
        window: seconds an orphan waits to be adopted.
    """

    def __init__(
        self, loop: Any, origin: str, end: Callable[[str], None], window: float
    ) -> None:  # no super(): no socket
        self.loop = loop
        self.peer = "owner"
        self.raw: Connection | None = None
        self._up = headers.encode(headers.Up(origin))
        self._ends = end
        self._window = window
        self._held: list[list[bytes]] = []  # frames for the owner while orphaned
        self._orphaned: Any = None  # the timer that ends an orphan

    @property
    def closed(self) -> bool:
        """Never: an orphan's frames wait for its next parent."""
        return False

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        """Send one frame to the owner, through the agent above (any thread)."""
        self.forward([self._up, *parts])

    def forward(self, parts: Sequence[Buffer]) -> None:
        """Pass up a frame that names its origin already (an ``UP`` from below), as is."""
        raw = self.raw
        if raw is not None:
            try:
                raw.send(parts)
                return
            except TransportClosed:
                pass
        self._held.append([bytes(part) for part in parts])

    def attach(self, raw: Connection) -> None:
        """The agent at the other end of ``raw`` adopted this one: the frames held for
        the owner go up through it, first (loop thread)."""
        self.raw = raw
        if self._orphaned is not None:
            self._orphaned.cancel()
            self._orphaned = None
        held, self._held = self._held, []
        for parts in held:
            self.forward(parts)

    def orphaned(self, conn: Connection) -> bool:
        """``conn`` closed: if it was the way up, wait to be adopted again, or end
        (loop thread). True when it was."""
        if conn is not self.raw:
            return False
        self.raw = None
        if self._orphaned is None:
            self._orphaned = self.loop.call_later(
                self._window,
                self._ends,
                f"the agent above it is gone and none adopted it within {self._window:g} s "
                "(twice Config.heartbeat_timeout)",
            )
        return True

    def handover(self, owner: Connection) -> None:
        """The owner itself adopted this agent on ``owner``: what was held goes there,
        unwrapped (they are this agent's own frames, or name their origin)."""
        if self._orphaned is not None:
            self._orphaned.cancel()
            self._orphaned = None
        held, self._held = self._held, []
        for parts in held:
            if parts[0] == self._up:
                parts = parts[1:]
            with contextlib.suppress(TransportClosed):
                owner.send(parts)

    def start(self) -> None:
        """Nothing to read: the owner's frames come on ``raw``."""

    def read_remaining(self) -> None:
        """Nothing to read here."""

    def close(self) -> None:
        """Nothing to close: ``raw`` is the agent above's."""

    def fileno(self) -> int:
        """The descriptor of the way up (-1 while orphaned)."""
        return -1 if self.raw is None else self.raw.fileno()
