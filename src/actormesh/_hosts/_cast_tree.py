"""The controller's tree of host agents: where a cast, or one actor's frame, enters it.

A host mesh with more hosts than its fan-out ``k`` gets a ``CastTree`` over its agents
(their positions are their order in the mesh, ``_tree``). A cast then leaves the
controller as one ``TREE_CAST`` per child of the controller whose subtree it touches
(at most ``k``), each carrying the branches below it; a frame for one actor leaves as a
``ROUTE`` through the agents above its host, the same path a cast takes, so one
sender's frames to one actor keep their order whatever mix of casts and single calls
carries them.

When an agent dies its position stays dead: its children are reached through its
nearest live ancestor from then on (``_tree.live_parent``), and the calls that were
under way through it toward its subtree are failed by the controller, naming it
(``Agents._tree_agent_lost``, ``_agents``): nothing waits for a subtree whose relay is gone.

Liveness follows the tree too: the controller probes only the agents it reaches first
(``on_top``), each interior agent probes its children (``watchers``, ``_child_watch``)
and reports a silent one, which the controller then declares dead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from . import _tree

if TYPE_CHECKING:
    from ._agent_link import AgentLink

__all__ = ["CastTree", "branch_ranks"]

T = TypeVar("T")


class CastTree:
    """The agents of one host mesh as a tree of fan-out ``k`` (loop thread).

    Args:
        links: the mesh's agents, in mesh order (their positions).
        k: the fan-out.
        addresses: where each agent is reached by the others (``HostOp listen``).
    """

    def __init__(self, links: Sequence[AgentLink], k: int, addresses: Sequence[str]) -> None:
        self.links = list(links)
        self.k = k
        self.addresses = list(addresses)
        self.dead: set[int] = set()
        self._position = {id(link): index for index, link in enumerate(self.links)}
        self._at = {address: link for link, address in zip(self.links, self.addresses)}
        for link in self.links:
            link.tree = self

    def position(self, link: AgentLink) -> int:
        return self._position[id(link)]

    def address(self, link: AgentLink) -> str:
        """Where the other agents reach ``link``'s."""
        return self.addresses[self.position(link)]

    def link_at(self, address: str) -> AgentLink | None:
        """The agent that other agents reach at ``address``."""
        return self._at.get(address)

    def on_top(self, link: AgentLink) -> bool:
        """True when the controller reaches ``link`` first, with no agent between."""
        return _tree.live_parent(self.position(link), self.k, self.dead) == _tree.ROOT

    def watchers(self) -> list[tuple[AgentLink | None, list[AgentLink]]]:
        """Who probes whom: each live interior agent (``None``: the controller) and its
        live children."""
        hosts = len(self.links)
        found: list[tuple[AgentLink | None, list[AgentLink]]] = []
        for node in [_tree.ROOT, *range(hosts)]:
            if node in self.dead:
                continue
            children = _tree.live_children(node, hosts, self.k, self.dead)
            if children:
                parent = None if node == _tree.ROOT else self.links[node]
                found.append((parent, [self.links[c] for c in children]))
        return found

    def under(self, link: AgentLink) -> list[AgentLink]:
        """The live agents whose nearest live ancestor is ``link``'s (those it adopts)."""
        found = _tree.live_children(self.position(link), len(self.links), self.k, self.dead)
        return [self.links[p] for p in found]

    def parent_of(self, link: AgentLink) -> AgentLink | None:
        """``link``'s nearest live ancestor (``None``: the controller)."""
        up = _tree.live_parent(self.position(link), self.k, self.dead)
        return None if up == _tree.ROOT else self.links[up]

    def route(self, link: AgentLink) -> tuple[AgentLink, tuple[str, ...]]:
        """The first agent on the way to ``link``'s host (a child of the controller),
        and the addresses of the agents after it, ``link``'s own last."""
        path = []
        node = self.position(link)
        while node != _tree.ROOT:
            path.append(node)
            node = _tree.live_parent(node, self.k, self.dead)
        path.reverse()
        return self.links[path[0]], tuple(self.addresses[p] for p in path[1:])

    def branches(
        self, targets: dict[int, list[T]]
    ) -> list[tuple[AgentLink, list[T], list[tuple[str, list[T], list[Any]]]]]:
        """One cast's way down: for each child of the controller it reaches, that agent,
        its own targets and the branches it forwards. ``targets``: by position (a
        cast's ``CastTarget`` or a plan's ``PlanTarget``)."""
        forward = _tree.plan(targets, self.k, self.dead)

        def branch(node: int) -> tuple[str, list[T], list[Any]]:
            below = [branch(child) for child in forward.get(node, ())]
            return (self.addresses[node], targets.get(node, []), below)

        return [
            (self.links[top], targets.get(top, []), [branch(c) for c in forward.get(top, ())])
            for top in forward.get(_tree.ROOT, ())
        ]

    def lost(self, link: AgentLink) -> tuple[list[AgentLink], list[AgentLink]]:
        """``link``'s agent died: the live agents below it (whose frames went through
        it) and the live ones above it (which may hold a connection to it)."""
        node = self.position(link)
        self.dead.add(node)
        dead = self.dead
        below = [p for p in _tree.subtree(node, len(self.links), self.k)[1:] if p not in dead]
        above = []
        up = _tree.parent(node, self.k)
        while up != _tree.ROOT:
            if up not in dead:
                above.append(up)
            up = _tree.parent(up, self.k)
        return [self.links[p] for p in below], [self.links[p] for p in above]


def branch_ranks(targets: Sequence[tuple[Any, ...]], below: list[Any]) -> list[int]:
    """Every rank a cast's branch, or a plan's, reaches (to fail them if it cannot be
    sent): each target's ranks are its second item (``CastTarget``, ``PlanTarget``)."""
    ranks = [rank for target in targets for rank in target[1]]
    for _, their_targets, their_below in below:
        ranks.extend(branch_ranks(their_targets, their_below))
    return ranks
