"""``record_metric``: this process' tallies of the metrics its code recorded.

Any thread of any process (an actor's endpoint, the controller's program) records into
its process' tallies, one per key (``actormesh._pure._reduce``). Nothing leaves the
process until the controller flushes a step (``actormesh.observability.MetricLogger``):
it asks each process with an OBSERVE for ``"metrics"``, which the worker's loop answers
with ``take()``, handing over the tallies and starting new ones. A record is a lock, a
dict lookup and a few additions; no message is sent per record.
"""

from __future__ import annotations

import threading
from typing import Any

from .._pure import Reduce, State, Tally

__all__ = ["record_metric", "take"]

_lock = threading.Lock()
_tallies: dict[str, Tally] = {}


def record_metric(key: str, value: Any, reduction: Reduce | str = Reduce.MEAN) -> None:
    """Record ``value`` for the metric ``key``, to be combined with ``reduction``.

    Callable from any actor or the controller, any thread. The values recorded under
    ``key`` by every rank between two flushes of the controller's ``MetricLogger`` are
    reduced into one number for that step: the mean, sum, max, min or (population)
    standard deviation of all of them.

    Args:
        key: the metric's name (``"loss"``, ``"reward/mean"``).
        value: a real number (an int, a float, a numpy scalar, a one-element tensor).
        reduction: a ``Reduce`` or its name (``"mean"``, ``"sum"``, ``"max"``, ``"min"``,
            ``"std"``); one key keeps one reduction.

    Raises:
        TypeError: ``key`` is not a non-empty string, or ``value`` is not a number.
        ValueError: an unknown reduction, or another reduction than the key's first.
    """
    if not isinstance(key, str) or not key:
        raise TypeError(f"record_metric: key must be a non-empty str, not {key!r}")
    if not isinstance(reduction, Reduce):
        try:
            reduction = Reduce(reduction)
        except ValueError:
            names = ", ".join(r.value for r in Reduce)
            raise ValueError(
                f"record_metric({key!r}): unknown reduction {reduction!r} (one of {names})"
            ) from None
    if isinstance(value, bool | str | bytes):
        raise TypeError(f"record_metric({key!r}): value must be a number, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"record_metric({key!r}): value must be a number, not {type(value).__name__}"
        ) from None
    with _lock:
        tally = _tallies.get(key)
        if tally is None:
            tally = _tallies[key] = Tally(reduction)
        elif tally.reduce is not reduction:
            raise ValueError(
                f"record_metric({key!r}): recorded with {tally.reduce.value!r} already in "
                f"this step, not {reduction.value!r}"
            )
        tally.add(number)


def take() -> dict[str, State]:
    """The tallies recorded since the last ``take``, as plain data; starts new ones."""
    global _tallies
    with _lock:
        taken, _tallies = _tallies, {}
    return {key: tally.state() for key, tally in taken.items()}
