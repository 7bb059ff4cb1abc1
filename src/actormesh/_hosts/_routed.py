"""The controller's way to a host agent that joined through the agent above it.

Once a tree of agents is formed, every agent the controller does not reach first is
adopted by its parent agent (``_uplink``) and the controller hangs up its own connection
to it. ``RoutedConnection`` stands where that connection stood (the agent's
``AgentLink.conn``, its process' connection, the runtime's connection to its address):
what is sent on it goes down the tree as a ``ROUTE`` to the agent itself, and the
frames the agent sends up (``UP``) are handled as if they came on it. It closes when
the agent is lost: its parent reports its connection closed (``EVENT agent_lost``) or
silent, or the agents above it are gone and it could not be adopted again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core import dumps, headers
from .._transport import Buffer, Connection, SegmentShare, TransportClosed

if TYPE_CHECKING:
    from ._agent_link import AgentLink

__all__ = ["RoutedConnection", "as_routed", "follows_casts"]


class RoutedConnection(Connection):
    """The controller's connection to an agent below another (see the module docstring).

    Args:
        link: the agent.
        closed_with: the runtime's handler of a closed connection (``_on_close``), called
            on the loop when this one closes.
    """

    def __init__(
        self, link: AgentLink, closed_with: Callable[[Connection, BaseException | None], None]
    ) -> None:  # no super(): no socket
        self.link = link
        self.peer = link.process.listen_path
        self._closed_with = closed_with
        self._closed = False
        # True while the agent above it died and another is adopting it: frames sent
        # meanwhile are held, so none reaches it before its adoption (it would drop one
        # that comes on a connection not its owner's), and leave after (``resume``, or
        # ``handover`` when this process adopts it itself).
        self.adopting = False
        self._held: list[list[bytes]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        """Send one frame to the agent, down the tree (any thread)."""
        if self._closed:
            raise TransportClosed(f"the host agent on {self.link.where} is gone")
        tree = self.link.tree
        assert tree is not None
        first, hops = tree.route(self.link)
        if self.adopting or first is self.link:  # (the latter: the controller adopts it)
            self._held.append([bytes(part) for part in parts])
            return
        first.conn.send([headers.encode(headers.Route(hops, headers.TO_AGENT)), *parts])

    def resume(self) -> None:
        """The agent above it now adopted it: the frames held go down to it (loop thread)."""
        self.handover(self)

    def handover(self, conn: Connection) -> None:
        """The controller reaches the agent on ``conn`` now (itself, down the tree, once
        adopted by the agent above): what was held goes there."""
        self.adopting = False
        held, self._held = self._held, []
        for parts in held:
            with contextlib.suppress(TransportClosed):
                conn.send(parts)

    def lost(self, note: str) -> None:
        """The agent is gone, as ``note`` says (loop thread)."""
        process = self.link.process
        if process.death_note is None:
            process.death_note = note
        self.close()

    def close(self) -> None:
        """The agent is gone to us: tell it so, as closing its own connection would (it
        ends, or detaches if it holds a lease; it may still hear), then handle the close
        as any connection's (loop thread or any)."""
        if self._closed:
            return
        with contextlib.suppress(TransportClosed, AssertionError):
            if not self.adopting:
                why = dumps(("the controller closed its connection to it",))[0]
                self.send([headers.encode(headers.HostOp(0, "owner_gone")), why])
        self._closed = True
        self._held.clear()
        self.link.loop.call_soon_threadsafe(self._closed_with, self, None)

    def start(self) -> None:
        """Nothing to read: the agent's frames come up the tree."""

    def read_remaining(self) -> None:
        """Nothing to read here."""

    def fileno(self) -> int:
        return -1

    def __repr__(self) -> str:
        return f"<routed connection to {self.link!r}>"


def as_routed(conn: Any) -> RoutedConnection | None:
    """``conn`` if it is a routed connection."""
    return conn if isinstance(conn, RoutedConnection) else None


def follows_casts(link: AgentLink) -> bool:
    """Whether what the controller sends ``link``'s agent on its connection reaches it by
    the path the tree's casts take, and so after them: an agent at the top of its tree,
    or one below that joined through its parent (not one whose adoption failed)."""
    tree = link.tree
    return tree is not None and (tree.on_top(link) or isinstance(link.conn, RoutedConnection))
