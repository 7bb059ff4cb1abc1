"""Timing and statistics helpers shared by every system's workloads.

Everything here is standard library only, so a fresh interpreter that imports it
pays nothing for it (the spawn-time workload times such interpreters).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "Budget",
    "Summary",
    "mbps",
    "percentile",
    "time_async",
    "time_sync",
]

MB = 1e6  # bandwidths are in MB/s of 10**6 bytes, as the table gives them


@dataclass(frozen=True)
class Budget:
    """How long a workload may measure: at most ``max_n`` samples, at least ``min_n``.

    Sampling stops at ``max_n`` samples, or once ``seconds`` have passed and at least
    ``min_n`` samples are in, whichever comes first. That bounds every workload in time
    whether the system under test takes 10 µs or 1 s per operation.
    """

    max_n: int
    seconds: float
    min_n: int = 3
    warmup: int = 0


@dataclass(frozen=True)
class Summary:
    """Order statistics of a sample of durations in seconds."""

    n: int
    median: float
    p99: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        """Summarise ``samples`` (must not be empty)."""
        if not samples:
            raise ValueError("no samples to summarise")
        ordered = sorted(samples)
        return cls(
            n=len(ordered),
            median=statistics.median(ordered),
            p99=percentile(ordered, 99.0),
            mean=statistics.fmean(ordered),
            min=ordered[0],
            max=ordered[-1],
        )

    def micros(self) -> dict[str, float]:
        """Median and p99 in microseconds, the keys the latency workloads report."""
        return {"median_us": self.median * 1e6, "p99_us": self.p99 * 1e6}


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of an already sorted sequence (nearest rank, interpolated)."""
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mbps(nbytes: int, seconds: float) -> float:
    """Bandwidth in MB/s (10**6 bytes per second)."""
    return nbytes / seconds / MB if seconds > 0 else float("inf")


def _done(samples: list[float], started: float, budget: Budget) -> bool:
    if len(samples) >= budget.max_n:
        return True
    return len(samples) >= budget.min_n and time.perf_counter() - started >= budget.seconds


def time_sync(op: Callable[[], object], budget: Budget) -> list[float]:
    """Durations of repeated calls of ``op()`` after ``budget.warmup`` untimed ones."""
    for _ in range(budget.warmup):
        op()
    samples: list[float] = []
    clock = time.perf_counter
    started = clock()
    while not _done(samples, started, budget):
        t0 = clock()
        op()
        samples.append(clock() - t0)
    return samples


async def time_async(op: Callable[[], Awaitable[object]], budget: Budget) -> list[float]:
    """Durations of repeated ``await op()`` after ``budget.warmup`` untimed ones."""
    for _ in range(budget.warmup):
        await op()
    samples: list[float] = []
    clock = time.perf_counter
    started = clock()
    while not _done(samples, started, budget):
        t0 = clock()
        await op()
        samples.append(clock() - t0)
    return samples
