"""Who forwards bulk data to whom, and in which pieces (pure; see ``_bulk``).

A transfer goes down a tree of hosts laid out in preorder: a node's *subtree* is a list
with the node first and its descendants after it. The descendants are cut into at
most ``fanout`` contiguous runs of nearly equal length; the first host of each run is
a child, and the run is that child's subtree. ``fanout`` 1 makes a chain.

Because the cut depends only on the subtree and the fan-out, a node that adopts the
children of a dead child (``children(dead_subtree[1:], fanout)``) finds exactly the
children the dead one had, with the same subtrees: a repair never reshapes what the
survivors forward.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["children", "piece"]

T = TypeVar("T")


def children(descendants: Sequence[T], fanout: int) -> list[list[T]]:
    """The subtrees of a node's children, from its ``descendants`` in preorder.

    Raises:
        ValueError: ``fanout`` is below 1.
    """
    if fanout < 1:
        raise ValueError(f"a bulk fan-out must be at least 1, not {fanout!r}")
    count = min(fanout, len(descendants))
    runs: list[list[T]] = []
    start = 0
    for index in range(count):
        length = len(descendants) // count + (1 if index < len(descendants) % count else 0)
        runs.append(list(descendants[start : start + length]))
        start += length
    return runs


def piece(starts: Sequence[int], total: int, offset: int, chunk: int, have: int) -> int:
    """The length of the chunk to send at stream ``offset``: at most ``chunk`` bytes,
    within one part (the parts begin at ``starts``, the stream ends at ``total``) and
    within the ``have`` bytes held."""
    part = bisect.bisect_right(starts, offset) - 1
    end = starts[part + 1] if part + 1 < len(starts) else total
    return max(0, min(offset + chunk, end, have) - offset)
