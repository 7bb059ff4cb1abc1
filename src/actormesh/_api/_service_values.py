"""What a service hands back: an answer with its provenance, and per-replica figures.

Plain frozen values, made on the runtime's loop thread and read anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["Answer", "ReplicaState", "ReplicaStats"]

R = TypeVar("R")

# A replica's life: "starting" (its processes are being built), "serving", "refitting"
# (out of rotation while it loads new weights), "restarting" (failed; being rebuilt as a
# unit), "draining" (scale() is removing it: it finishes what it holds, takes nothing new),
# "failed" (its restart budget is spent), "stopped".
ReplicaState = Literal[
    "starting", "serving", "refitting", "restarting", "draining", "failed", "stopped"
]


@dataclass(frozen=True)
class Answer(Generic[R]):
    """One call's result through a service, and what made it.

    Attributes:
        value: the replica's answer (rank 0's, or the service's reduction of every rank's).
        version: the weight version the replica held while it ran the call (a replica is
            refitted only between calls, so this is exact).
        replica: the number of the replica that answered.
        attempts: how many times the call was sent (more than 1 only for an idempotent
            endpoint whose replica failed under it).
    """

    value: R
    version: int
    replica: int
    attempts: int


@dataclass(frozen=True)
class ReplicaStats:
    """A replica's figures, as ``service.stats()`` reports them.

    Attributes:
        replica: its number.
        state: where it is in its life (see `ReplicaState`).
        queued: calls routed to it and not yet sent (they wait for ``max_in_flight``).
        in_flight: calls sent to it and not yet answered.
        completed: calls it answered.
        failed: calls that ended with an error on it (the endpoint raised, or the replica
            failed under them).
        requests_per_s: calls it answered per second over the last ``window`` seconds.
        restarts: times it was rebuilt as a unit.
        version: the weight version it holds (``None`` until its first load).
        pids: its processes' ids, rank order (empty while it has none).
    """

    replica: int
    state: ReplicaState
    queued: int
    in_flight: int
    completed: int
    failed: int
    requests_per_s: float
    restarts: int
    version: int | None
    pids: tuple[int, ...]
