"""What one actor's endpoints have done: calls, errors and recent run times.

The mailbox records every message it ran, on the thread that ran it (the loop for
``async`` endpoints, the actor's thread for ``def`` ones); the process' answer to an
OBSERVE frame reads it on the loop, from copies each taken in one step (one thread
appends, one reads: no lock on the per-call path). Recording is a dict
lookup, two additions and a bounded append, so keeping it on costs nothing measurable
per call; ``Config.observe`` turns it off all the same.

Run time is the time the actor spent on the message (its ``def`` or ``async def`` body),
from the moment it started, not the time it waited in the queue: that is the caller's
latency minus the queue, which ``actormesh top`` shows beside it (queue depth).
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["EndpointStats"]

_WINDOW = 512  # run times kept per endpoint for the percentiles


class _Counts:
    __slots__ = ("calls", "errors", "times")

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        self.times: deque[float] = deque(maxlen=_WINDOW)


class EndpointStats:
    """Per-endpoint counts and run times of one actor (one writer per endpoint)."""

    __slots__ = ("_by_endpoint",)

    def __init__(self) -> None:
        self._by_endpoint: dict[str, _Counts] = {}

    def record(self, endpoint: str, seconds: float, ok: bool) -> None:
        """One message for ``endpoint`` ran for ``seconds``; ``ok`` False: it raised."""
        counts = self._by_endpoint.get(endpoint)
        if counts is None:
            counts = self._by_endpoint[endpoint] = _Counts()
        counts.calls += 1
        if not ok:
            counts.errors += 1
        counts.times.append(seconds)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per endpoint: calls, errors, and the 50th and 99th percentile run times (s)."""
        report = {}
        # list() and sorted() copy in one step under the GIL; iterating the live dict or
        # deque could meet a concurrent insert or append.
        for endpoint, counts in list(self._by_endpoint.items()):
            ordered = sorted(counts.times)
            report[endpoint] = {
                "calls": counts.calls,
                "errors": counts.errors,
                "p50": percentile(ordered, 0.50),
                "p99": percentile(ordered, 0.99),
            }
        return report


def percentile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted values (nearest rank), ``None`` when there are none."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
