"""``AgentRouter``: how a cast leaves this process, batched per host agent.

The frames of one call go to many processes. Those of workers behind one host agent
that share their parts leave as one ``CAST`` to that agent (one frame per host, not per
process); in a tree of agents (``_cast_tree``), as one ``TREE_CAST`` per child of this
process; large parts for several agents go down a chain of them (``_bulk``); frames to
several processes of this host share one shared-memory segment. The router gets from the
runtime only a way to send one frame (``Sender``) and the bulk part (``BulkCasts``), so
it can be read, and tested, alone (``tests/unit/test_agent_router.py``).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, Protocol

from .._core import headers
from .._exceptions import ActorDiedError
from .._transport import Buffer, Connection, SegmentShare, TransportClosed
from ._agent_link import RelayConnection
from ._cast_tree import CastTree, branch_ranks
from ._routed import follows_casts

__all__ = ["AgentRouter", "BulkCasts", "Frame", "Sender"]

# One frame to send: the connection, the ranks it is for, its header, its parts.
Frame = tuple[Connection, tuple[int, ...], tuple[Any, ...], list[Any]]
# A group of frames for the workers of one agent, and the parts they share.
Group = tuple[list[tuple[Any, tuple[int, ...], Any]], list[Any]]
Failed = list[tuple[tuple[int, ...], str]]


class Sender(Protocol):
    """Sends one frame (``CoreRuntime.send``); raises ``ActorDiedError`` when the
    connection is gone."""

    def __call__(
        self,
        conn: Connection,
        header: Any,
        parts: Sequence[Buffer],
        share: SegmentShare | None = None,
    ) -> None: ...


class BulkCasts(Protocol):
    """What the router asks of the bulk part (``_bulk.Bulk``)."""

    routes: dict[str, Any]

    def cast(
        self, groups: list[Group], gather: int, combine: bytes | None, failed: Failed
    ) -> list[Group]:
        """Take the groups whose large parts go as one bulk transfer; the rest."""
        ...

    def cast_routed(
        self, frames: Sequence[Frame], gather: int, combine: bytes | None, failed: Failed
    ) -> list[Frame]:
        """Cast through the agents of workers another process owns; the frames left."""
        ...


class AgentRouter:
    """Sends a call's frames, batched per host agent (see the module docstring)."""

    def __init__(self, send: Sender, bulk: BulkCasts) -> None:
        self.send = send
        self.bulk = bulk

    def send_frames(
        self,
        frames: Sequence[tuple[Connection, tuple[int, ...], tuple[Any, ...], list[Any]]],
        gather: int = 0,
        combine: bytes | None = None,
    ) -> list[tuple[tuple[int, ...], str]]:
        """Send ``(conn, ranks, header, parts)`` frames; the ``(ranks, why)`` that failed.

        Frames for several workers behind one host agent that share their parts leave as
        one ``CAST`` to that agent (one frame per host, not per process); a nonzero
        ``gather`` (the request's id) has each agent send its workers' replies as one, and
        a ``combine`` (a reducing call's function, pickled) has it fold their values.
        """
        if len(frames) == 1 and not (gather and self.bulk.routes):
            # One frame straight to its process (a ``call_one``, most calls): what the
            # general way below comes to for it, without its groupings.
            conn, ranks, header, parts = frames[0]
            if not isinstance(conn, RelayConnection) or conn.closed:
                try:
                    self.send(conn, header, parts, None)
                except ActorDiedError as error:
                    return [(ranks, error.reason or str(error))]
                return []
        failed: list[tuple[tuple[int, ...], str]] = []
        by_agent: dict[tuple[int, int], list[tuple[RelayConnection, tuple[int, ...], Any]]] = {}
        parts_of: dict[tuple[int, int], list[Any]] = {}
        # Frames to several processes of this host with the same parts copy their large
        # parts into shared memory once, for all of them.
        direct = []
        for conn, ranks, header, parts in frames:
            if isinstance(conn, RelayConnection) and not conn.closed:
                key = (id(conn.link), id(parts))
                by_agent.setdefault(key, []).append((conn, ranks, header))
                parts_of[key] = parts
            else:
                direct.append((conn, ranks, header, parts))
        if gather and self.bulk.routes:  # workers of agents another process owns (_bulk)
            direct = self.bulk.cast_routed(direct, gather, combine, failed)
        shares: dict[int, SegmentShare] = {}
        if len(direct) > 1:
            readers = collections.Counter(id(parts) for _, _, _, parts in direct)
            shares = {key: SegmentShare() for key, count in readers.items() if count > 1}
        for conn, ranks, header, parts in direct:
            try:
                self.send(conn, header, parts, shares.get(id(parts)))
            except ActorDiedError as error:
                failed.append((ranks, error.reason or str(error)))
        level: list[Group] = []
        treed: list[Group] = []
        for key, group in by_agent.items():
            (level if group[0][0].link.tree is None else treed).append((group, parts_of[key]))
        # Large parts for several agents go down a chain of them (_bulk): agents of one
        # level, or of a tree whose agents each get what this process sends it by the
        # path its casts take (_routed.follows_casts), so a bulk cast keeps its place
        # among them. (Sent to an agent straight, it could overtake them.)
        if len(level) > 1:
            level = self.bulk.cast(level, gather, combine, failed)
        if len(treed) > 1 and all(follows_casts(group[0][0].link) for group, _ in treed):
            treed = self.bulk.cast(treed, gather, combine, failed)
        trees: dict[tuple[int, int], tuple[CastTree, list[Any], list[Any]]] = {}
        for group, parts in treed:
            tree = group[0][0].link.tree
            assert tree is not None
            trees.setdefault((id(tree), id(parts)), (tree, parts, []))[2].extend(group)
        for group, parts in level:
            first = group[0][0]
            try:
                if len(group) == 1:
                    self.send(first, group[0][2], parts)
                else:
                    targets = [(c.peer, r, headers.encode(h)) for c, r, h in group]
                    first.link.cast(gather, targets, parts, combine)
            except (ActorDiedError, TransportClosed) as error:
                failed.extend((r, str(error)) for _, r, _ in group)
        for tree, parts, members in trees.values():
            failed.extend(self._tree_cast(tree, members, parts, gather, combine))
        return failed

    def _tree_cast(
        self,
        tree: CastTree,
        group: list[tuple[RelayConnection, tuple[int, ...], Any]],
        parts: list[Any],
        gather: int,
        combine: bytes | None,
    ) -> list[tuple[tuple[int, ...], str]]:
        """Send one cast into a tree of agents: one ``TREE_CAST`` per child of this
        process whose subtree it touches (``_cast_tree``); the ``(ranks, why)`` that
        failed."""
        targets: dict[int, list[headers.CastTarget]] = {}
        for conn, ranks, header in group:
            position = tree.position(conn.link)
            targets.setdefault(position, []).append((conn.peer, ranks, headers.encode(header)))
        failed: list[tuple[tuple[int, ...], str]] = []
        for top, own, below in tree.branches(targets):
            header = headers.encode(headers.TreeCast(gather, own, combine, below))
            try:
                top.conn.send([header, *parts])
            except TransportClosed as error:
                failed.append((tuple(branch_ranks(own, below)), str(error)))
        return failed
