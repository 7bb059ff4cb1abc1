"""The replies of one gathered cast inside a host agent, sent up as one frame.

A gathering cast (a ``call``) reaches several workers of a host, and, in a tree of
agents (``_tree``), the child agents whose subtrees it touches. The agent collects what
they answer in a ``Batch`` and sends it up as one ``REPLIES`` frame once nobody is left
to wait for: its workers answered (or died), and each child link sent its subtree's one
frame (or was lost). With a reduction the values, and the children's ``PARTIAL``
replies, fold into one ``PARTIAL`` reply (``_reduction``).

Between agents, a subtree's frame ends with a ``DONE`` entry (no parts) naming the call:
its parent stops waiting for that link even when nothing else came (every rank answered
early, or none was there). The controller never sees ``DONE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._core import headers
from .._transport import Connection
from ._reduction import Reduction

__all__ = ["Batch", "DONE"]

# The rank of the last entry of a subtree's REPLIES frame to its parent agent.
DONE = -3


@dataclass
class Batch:
    """What one host (and, in a tree, its subtree) answered so far to one gathered cast."""

    upstream: Connection
    # Who is still to answer: worker address -> ranks there; child agent address -> 1.
    waiting: dict[str, int]
    reduction: Reduction | None = None
    # True between agents: the frame up always goes, and ends with a DONE entry.
    subtree: bool = False
    replies: list[tuple[int, int, bool, int]] = field(default_factory=list)
    parts: list[Any] = field(default_factory=list)
    # The replies folded so far, as they came: they go up so if the reduction breaks.
    folded: list[tuple[int, list[Any]]] = field(default_factory=list)

    def add(self, req_id: int, rank: int, ok: bool, parts: list[Any]) -> None:
        """A reply (``parts``: after its header); ``rank`` ``PARTIAL``: a child agent's
        folded values."""
        reduction = self.reduction
        if ok and reduction is not None:
            folded = reduction.add_partial(parts) if rank == headers.PARTIAL else (
                reduction.add(rank, parts)
            )  # fmt: skip
            if folded:
                self.folded.append((rank, parts))
                return
        self.replies.append((req_id, rank, ok, len(parts)))
        self.parts.extend(parts)

    def answered(self, source: str) -> bool:
        """One answer from ``source`` (a worker's address, or a child agent's) came;
        True once nobody is left to wait for."""
        left = self.waiting.get(source)
        if left is not None:
            if left <= 1:
                del self.waiting[source]
            else:
                self.waiting[source] = left - 1
        return not self.waiting

    def take(self, req_id: int, last: bool) -> list[Any] | None:
        """The ``REPLIES`` frame of everything added since the last take, which it
        forgets (``None``: nothing to send). ``last``: the batch is complete, and a
        subtree's frame says so."""
        replies = list(self.replies)
        parts = list(self.parts)
        reduction = self.reduction
        if reduction is not None and not reduction.broken and reduction.ranks:
            partial = reduction.partial()
            replies.append((req_id, headers.PARTIAL, True, len(partial)))
            parts.extend(partial)
            reduction.reset()
        else:
            for rank, folded in self.folded:
                replies.append((req_id, rank, True, len(folded)))
                parts.extend(folded)
        self.replies, self.parts, self.folded = [], [], []
        if last and self.subtree:
            replies.append((req_id, DONE, True, 0))
        if not replies:
            return None
        return [headers.encode(headers.Replies(replies)), *parts]
