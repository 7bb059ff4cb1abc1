"""How ``record_metric`` values of many calls and many ranks become one number per step.

Each process keeps one ``Tally`` per metric key: the count, sum, mean, spread (the sum of
squared deviations, ``m2``), smallest and largest of the values recorded since the last
flush. Tallies merge exactly (Chan et al.'s pairwise update for the spread), so a mean
or standard deviation across ranks is that of every value any rank recorded, not a mean
of the ranks' means. A tally travels as a plain tuple (``state``), so it pickles
without this module's classes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable

__all__ = ["Reduce", "Tally", "reduce_states"]


class Reduce(enum.Enum):
    """How a metric's values within a step are combined (torchforge's ``Reduce``)."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    STD = "std"


State = tuple[str, int, float, float, float, float, float]  # reduce, n, sum, mean, m2, lo, hi


class Tally:
    """Running summary of one metric's values (see the module docstring).

    Not thread-safe: the caller serializes ``add`` and ``state``.
    """

    __slots__ = ("count", "high", "low", "m2", "mean", "reduce", "total")

    def __init__(self, reduce: Reduce) -> None:
        self.reduce = reduce
        self.count = 0
        self.total = 0.0
        self.mean = 0.0
        self.m2 = 0.0
        self.low = math.inf
        self.high = -math.inf

    def add(self, value: float) -> None:
        """One more value (Welford's update)."""
        self.count += 1
        self.total += value
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value

    def merge(self, other: Tally) -> None:
        """Fold in another tally of the same metric."""
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.total, self.mean = other.count, other.total, other.mean
            self.m2, self.low, self.high = other.m2, other.low, other.high
            return
        count = self.count + other.count
        delta = other.mean - self.mean
        self.m2 += other.m2 + delta * delta * self.count * other.count / count
        self.mean += delta * other.count / count
        self.count = count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)

    def value(self) -> float:
        """The reduced value (NaN when nothing was recorded)."""
        if self.count == 0:
            return math.nan
        if self.reduce is Reduce.MEAN:
            return self.mean
        if self.reduce is Reduce.SUM:
            return self.total
        if self.reduce is Reduce.MAX:
            return self.high
        if self.reduce is Reduce.MIN:
            return self.low
        return math.sqrt(self.m2 / self.count)  # population standard deviation

    def state(self) -> State:
        """The tally as plain data."""
        return (
            self.reduce.value,
            self.count,
            self.total,
            self.mean,
            self.m2,
            self.low,
            self.high,
        )

    @classmethod
    def from_state(cls, state: State) -> Tally:
        """The inverse of ``state``."""
        tally = cls(Reduce(state[0]))
        tally.count, tally.total, tally.mean, tally.m2, tally.low, tally.high = state[1:]
        return tally


def reduce_states(
    per_process: Iterable[dict[str, State]],
) -> tuple[dict[str, float], dict[str, int], list[str]]:
    """Merge each process' tallies by key and reduce them.

    Returns ``(values, ranks, conflicts)``: the reduced value of each key, how many
    processes recorded it, and the keys recorded with different reductions in different
    processes (those keep the first process' reduction and ignore the others').
    """
    merged: dict[str, Tally] = {}
    ranks: dict[str, int] = {}
    conflicts: list[str] = []
    for states in per_process:
        for key, state in states.items():
            tally = Tally.from_state(state)
            have = merged.get(key)
            if have is None:
                merged[key] = tally
            elif have.reduce is not tally.reduce:
                if key not in conflicts:
                    conflicts.append(key)
                continue
            else:
                have.merge(tally)
            ranks[key] = ranks.get(key, 0) + 1
    return {key: merged[key].value() for key in sorted(merged)}, ranks, conflicts
