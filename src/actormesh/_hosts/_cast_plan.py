"""Casts by plan: a call to a whole mesh behind host agents, at a cost that does not grow
with the mesh.

A cast through a tree (``_cast_tree``) names every worker and its ranks, each with its
own header, in the frames the controller builds: its cost grows with the actors, however
few frames carry it. But the workers of a mesh, and the ranks each hosts, do not change
from one call to the next. So the first whole-mesh call after the mesh's layout (or the
tree's) changed sends each agent of the tree its part of a ``CastPlan`` once: its own
workers and ranks, and the child agents the mesh's casts go on to. Every call after it
leaves the controller as one ``PlannedCast`` per child of the controller: the call's
fields without any rank (the request id, the endpoint, a port), and the arguments. Each
agent makes its own workers' headers and forwards the frame to its children as it came.
The controller's cost of a cast is then one small frame per child: ``k``, whatever the
number of hosts. Agents of one level (a host mesh of at most ``k`` hosts) get plans too:
each is a child of the controller with no children of its own. There, a cast whose large
parts would go down a chain of agents (``_bulk``) is not cast by plan
(``Plan.by_chain``), nor is one in a tree whose agents joined through their parents
(``_routed.follows_casts``).

A plan is made on the first call and kept while nothing changes: every lost connection,
process marked dead or revived, and every agent lost from the tree bumps the runtime's
``topology`` count, and a plan made at an older count is made again (the caller keeps
it: ``_api/_planned``).
Only the whole mesh, as spawned, is cast by plan; a slice, a mesh with a process being
restarted, or one not behind host agents alone (all of one tree, or all of one level)
goes the usual way.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from .._core import headers
from .._exceptions import ActorDiedError
from .._transport import Buffer, Connection, TransportClosed, is_tcp, route
from ._agent_link import AgentLink, RelayConnection
from ._cast_tree import branch_ranks
from ._routed import follows_casts

__all__ = ["CastPlans", "Plan"]

Failed = list[tuple[tuple[int, ...], str]]


class Plan:
    """One mesh's plan (see the module docstring).

    Attributes:
        mesh_id: the mesh's id.
        ident: the plan's number, which the agents keep it by.
        version: the runtime's ``topology`` count it was made at.
        routes: ``(process path, its connection, ranks there)``, in rank order.
        conns: the ids of those connections (a request cast by plan reacts to their loss).
        count: how many ranks it reaches.
        tcp: every process is reached over TCP (no reply route can open to one).
    """

    def __init__(
        self,
        mesh_id: str,
        ident: int,
        version: int,
        tops: list[tuple[AgentLink, list[headers.PlanTarget], list[headers.PlanBranch]]],
        routes: list[tuple[str, Connection, tuple[int, ...]]],
        chains: Callable[[Sequence[Buffer]], bool] | None = None,
    ) -> None:
        self.mesh_id = mesh_id
        self.ident = ident
        self.version = version
        self.tops = tops
        self.routes = routes
        self.conns = frozenset(id(conn) for _, conn, _ in routes)
        self.count = sum(len(ranks) for _, _, ranks in routes)
        self.tcp = all(is_tcp(route(path)) for path, _, _ in routes)
        self.taught = False  # its CastPlan frames went down the tree (``cast``)
        self._chains = chains

    def by_chain(self, parts: Sequence[Buffer]) -> bool:
        """Whether a cast of ``parts`` should go down a chain of agents instead (agents
        of one level, parts large enough for a bulk transfer)."""
        return self._chains is not None and self._chains(parts)

    def cast(
        self,
        req_id: int,
        endpoint: str,
        parts: Sequence[Buffer],
        *,
        gather: int = 0,
        combine: bytes | None = None,
        port: tuple[str, int] | None = None,
    ) -> Failed:
        """Send a call to every rank: one ``PlannedCast`` per child of the controller,
        after its branch of the plan the first time; the ``(ranks, why)`` that could not
        be sent. (The caller holds its mesh's plan lock, ``_api/_planned.by_plan``: one
        thread at a time teaches a mesh's plan and casts by it.)"""
        teach, self.taught = not self.taught, True
        cast = headers.PlannedCast(
            gather, combine, self.mesh_id, self.ident, req_id, endpoint, port
        )
        frame = [headers.encode(cast), *parts]
        failed: Failed = []
        for link, targets, below in self.tops:
            try:
                if teach:
                    plan = headers.CastPlan(self.mesh_id, self.ident, targets, below)
                    link.conn.send([headers.encode(plan)])
                link.conn.send(frame)
            except TransportClosed as error:
                failed.append((tuple(branch_ranks(targets, below)), str(error)))
        return failed


class CastPlans:
    """Makes the plans of the meshes this process casts to (see the module docstring);
    whoever casts keeps them, with the ``topology`` count they were made at.

    Args:
        connection: the connection to a process path (``CoreRuntime.connection``).
        relaunching: whether the process at a path is being restarted.
        chains: whether a cast of some parts to agents of one level goes down a chain of
            them (``Bulk.chains``).
    """

    def __init__(
        self,
        connection: Callable[[str], Connection],
        relaunching: Callable[[str], bool],
        chains: Callable[[Sequence[Buffer]], bool],
    ) -> None:
        self._connection = connection
        self._relaunching = relaunching
        self._chains = chains
        self._ids = itertools.count(1)

    def make(
        self, mesh_id: str, routes: Sequence[tuple[str, tuple[int, ...]]], version: int
    ) -> Plan | None:
        """The plan of the whole mesh ``mesh_id`` (``routes``: its ``(path, ranks)``),
        made at ``version`` of the runtime's topology; ``None`` when it is not cast by
        plan (see the module docstring)."""
        trees = set()
        by_position: dict[int, list[headers.PlanTarget]] = {}  # in a tree
        by_link: dict[int, tuple[AgentLink, list[headers.PlanTarget]]] = {}  # one level
        found: list[tuple[str, Connection, tuple[int, ...]]] = []
        for path, ranks in routes:
            if self._relaunching(path):
                return None
            try:
                conn = self._connection(path)
            except ActorDiedError:
                return None
            if not isinstance(conn, RelayConnection) or conn.closed:
                return None
            tree = conn.link.tree
            trees.add(id(tree))
            if tree is None:
                by_link.setdefault(id(conn.link), (conn.link, []))[1].append((conn.peer, ranks))
            else:
                by_position.setdefault(tree.position(conn.link), []).append((conn.peer, ranks))
            found.append((path, conn, ranks))
        if len(trees) != 1 or len(found) < 2:
            return None  # (nothing to plan, or agents of several trees, or of a tree and not)
        tops: list[tuple[AgentLink, list[headers.PlanTarget], list[headers.PlanBranch]]]
        if tree is None:
            tops = [(link, targets, []) for link, targets in by_link.values()]
            return Plan(mesh_id, next(self._ids), version, tops, found, self._chains)
        tops = tree.branches(by_position)
        # Large parts go down a chain of agents here too, if each agent's bulk cast would
        # reach it after the casts before it (_routed.follows_casts).
        joined = all(isinstance(c, RelayConnection) and follows_casts(c.link) for _, c, _ in found)
        chains = self._chains if joined else None
        return Plan(mesh_id, next(self._ids), version, tops, found, chains)
