"""A reducing call's fold inside a host agent: its workers' values combined into one.

A reducing call (``endpoint.reduce(combine, ...)``) that reaches several workers of one
host through its agent carries the combine function; the agent folds each worker's value
into one as the replies come, and sends the owner a single ``PARTIAL`` reply holding the
ranks it stands for (as runs) and their combined value, so the owner receives one value per host,
not one per actor. In a tree of agents (``_tree``) each agent folds its children's
partials into its own, so the owner receives one value per child link. The function
must be associative and commutative: values are folded in the order they arrive, and
the owner folds the hosts' partials again.

Errors are never folded: a failed rank's reply goes up as it came. Anything the agent
cannot do itself (unpickle the function or a value here, a combine that raises) makes it
send every reply as it came, unfolded: the owner folds them and, if it fails the same
way, raises where the caller sees it.
"""

from __future__ import annotations

import logging
from typing import Any

from .._core import dumps, loads
from .._shape import rank_runs, run_ranks

__all__ = ["Reduction"]

log = logging.getLogger("actormesh.hosts")


class Reduction:
    """The fold of one gathered cast's values, or ``broken`` once it cannot go on."""

    def __init__(self, combine: bytes) -> None:
        self.broken = False
        self.ranks: list[int] = []
        self._value: Any = None
        try:
            self._combine = loads(combine)
        except Exception as error:  # (its module is not importable by the agent, say)
            self._broken(error)

    def add(self, rank: int, parts: list[Any]) -> bool:
        """Fold a successful reply's value (``parts``: its pickle and buffers); False when
        the reduction is broken and the reply must go up as it came."""
        if self.broken:
            return False
        try:
            value = loads(parts[0], parts[1:])
            self._value = value if not self.ranks else self._combine(self._value, value)
        except Exception as error:
            self._broken(error)
            return False
        self.ranks.append(rank)
        return True

    def add_partial(self, parts: list[Any]) -> bool:
        """Fold a child agent's ``PARTIAL`` reply (its pickled ``(runs of ranks,
        value)``); False when the reduction is broken and the reply must go up as it
        came."""
        if self.broken:
            return False
        try:
            runs, value = loads(parts[0], parts[1:])
            self._value = value if not self.ranks else self._combine(self._value, value)
        except Exception as error:
            self._broken(error)
            return False
        self.ranks.extend(run_ranks(runs))
        return True

    def reset(self) -> None:
        """Start again from nothing (what was folded went up)."""
        self.ranks = []
        self._value = None

    def partial(self) -> list[Any]:
        """The parts of the ``PARTIAL`` reply: ``(runs of ranks, combined value)``,
        pickled (a subtree's ranks are a few runs: ``_shape.rank_runs``)."""
        payload, buffers = dumps((rank_runs(self.ranks), self._value))
        return [payload, *buffers]

    def _broken(self, error: BaseException) -> None:
        log.debug("a reduction goes up unfolded: %s: %s", type(error).__name__, error)
        self.broken = True
