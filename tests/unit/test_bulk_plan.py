"""Who forwards bulk data to whom (``_hosts/_bulk_plan.py``, pure)."""

from __future__ import annotations

import pytest

from actormesh._hosts._bulk_plan import children, piece

pytestmark = pytest.mark.timeout(10)


def _edges(hosts: list[int], fanout: int) -> set[tuple[int, int]]:
    """Every (parent, child) edge of the tree a sender (-1) makes over ``hosts``."""
    edges, todo = set(), [(-1, [-1, *hosts])]
    while todo:
        parent, subtree = todo.pop()
        for run in children(subtree[1:], fanout):
            edges.add((parent, run[0]))
            todo.append((run[0], run))
    return edges


def test_fanout_one_is_a_chain() -> None:
    assert children([1, 2, 3], 1) == [[1, 2, 3]]
    assert _edges([1, 2, 3, 4], 1) == {(-1, 1), (1, 2), (2, 3), (3, 4)}


def test_a_tree_reaches_every_host_once_with_at_most_fanout_children_each() -> None:
    hosts = list(range(100))
    for fanout in (2, 3, 16):
        edges = _edges(hosts, fanout)
        assert sorted(child for _, child in edges) == hosts  # each host has one parent
        per_parent: dict[int, int] = {}
        for parent, _ in edges:
            per_parent[parent] = per_parent.get(parent, 0) + 1
        assert max(per_parent.values()) <= fanout
    assert children([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]


def test_adopting_a_dead_childs_children_keeps_their_subtrees() -> None:
    # A parent that adopts the children of a dead child cuts the dead one's descendants
    # exactly as it did: the survivors forward to the same hosts as before.
    subtree = list(range(1, 20))
    for fanout in (1, 2, 4):
        for dead in children(subtree, fanout):
            below = children(dead[1:], fanout)
            assert below == children(dead[1:], fanout)
            for run in below:
                assert run == dead[dead.index(run[0]) : dead.index(run[0]) + len(run)]


def test_a_piece_stays_within_its_part_the_chunk_and_what_is_held() -> None:
    starts, total = [0, 10, 25], 30  # parts of 10, 15 and 5 bytes
    assert piece(starts, total, 0, 4, 30) == 4
    assert piece(starts, total, 8, 4, 30) == 2  # to the end of part 0
    assert piece(starts, total, 10, 100, 30) == 15  # the whole of part 1
    assert piece(starts, total, 12, 100, 20) == 8  # only what is held
    assert piece(starts, total, 25, 100, 30) == 5
    assert piece(starts, total, 30, 100, 30) == 0


def test_a_fanout_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        children([1, 2], 0)
