"""Who relays to whom: the k-ary tree of host agents, as pure functions of positions.

The hosts of a host mesh have positions ``0 .. hosts-1`` (their order in the mesh). With
fan-out ``k`` the controller (``ROOT``) is the parent of positions ``0 .. k-1``, and the
children of position ``p`` are ``k*(p+1) .. k*(p+1)+k-1`` (those below ``hosts``): a
complete k-ary tree with the controller on top, as a heap is laid out. Nothing here
knows about connections or frames: the controller's routing (``_cast_tree``), the
agents, and simulations of many hosts all ask the same functions.

A dead position stays in the tree (positions never move, so routes to live hosts change
only around the dead one): its live children are adopted by its nearest live ancestor,
as ``live_children``/``live_parent`` say.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = [
    "ROOT",
    "check_fan_out",
    "children",
    "depth",
    "live_children",
    "live_parent",
    "parent",
    "plan",
    "subtree",
]

# The controller: the parent of the first k positions.
ROOT = -1


def check_fan_out(k: object) -> int:
    """``k`` as a fan-out.

    Raises:
        ValueError: ``k`` is not an int of at least 2 (a tree with one child per node is
            a chain, and 0 or 1 cannot reach every host).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"fan_out must be an int >= 2, not {k!r}")
    return k


def children(index: int, hosts: int, k: int) -> range:
    """The positions whose parent is ``index`` (``ROOT``: the controller's)."""
    first = 0 if index == ROOT else k * (index + 1)
    return range(min(first, hosts), min(first + k, hosts))


def parent(index: int, k: int) -> int:
    """The parent of position ``index`` (``ROOT`` for the first ``k``)."""
    return ROOT if index < k else index // k - 1


def subtree(index: int, hosts: int, k: int) -> list[int]:
    """``index`` and every position below it, top down."""
    found = [index]
    at = 0
    while at < len(found):
        found.extend(children(found[at], hosts, k))
        at += 1
    return found if index != ROOT else found[1:]


def depth(hosts: int, k: int) -> int:
    """How many agent levels ``hosts`` positions take (1: the controller reaches all)."""
    levels, last = 0, ROOT
    while last < hosts - 1:
        levels += 1
        last = (last + 1) * k + k - 1 if last != ROOT else k - 1
    return max(levels, 1)


def live_parent(index: int, k: int, dead: Collection[int]) -> int:
    """The nearest live ancestor of ``index`` (``ROOT`` if none is)."""
    up = parent(index, k)
    while up != ROOT and up in dead:
        up = parent(up, k)
    return up


def live_children(index: int, hosts: int, k: int, dead: Collection[int]) -> list[int]:
    """The live positions whose nearest live ancestor is ``index``: its own live
    children, and those of its dead children, adopted (recursively)."""
    found: list[int] = []
    for child in children(index, hosts, k):
        if child in dead:
            found.extend(live_children(child, hosts, k, dead))
        else:
            found.append(child)
    return found


def plan(
    touched: Iterable[int], k: int, dead: Collection[int] = frozenset()
) -> dict[int, list[int]]:
    """The relays that reach ``touched`` (live positions) and nothing else.

    Returns ``{position: its children to forward to}``, ``ROOT`` included: each touched
    position hangs under its nearest live ancestor, and every ancestor on the way is in
    (whether touched or not: it relays). Children are in ascending order.
    """
    below: dict[int, set[int]] = {}
    for position in touched:
        node = position
        while node != ROOT:
            up = live_parent(node, k, dead)
            known = up in below
            below.setdefault(up, set()).add(node)
            if known:
                break  # the rest of the way up is in already
            node = up
    return {node: sorted(kids) for node, kids in below.items()}
