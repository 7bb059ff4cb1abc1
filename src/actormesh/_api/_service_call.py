"""One call through a service, and the settings every call of a service follows.

A `ServiceCall` lives on the runtime's loop thread from the moment it is submitted to the
moment its future is resolved; it is in exactly one place at a time: the service's
pending queue, one replica's queue, one replica's in-flight set, or a retry timer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._pure import ChoosePolicy
from .._shape import ValueMesh
from ._future import Future

__all__ = ["RefitPolicy", "ServiceCall", "ServiceSettings"]

# How a weight refit meets requests: "pause" (new calls wait; every replica loads once
# its calls in flight end; all serve the new version together) or "rolling" (one replica
# at a time leaves rotation to load; the others keep serving the old version).
RefitPolicy = Literal["pause", "rolling"]


@dataclass(frozen=True)
class ServiceSettings:
    """How a service builds, routes to, restarts and refits its replicas (validated by
    ``spawn_service``; see its docstring for each)."""

    replicas: int
    per_replica: Mapping[str, int]
    router: ChoosePolicy
    max_in_flight: int = 1
    max_restarts: int = 3
    restart_window: float = 300.0
    max_attempts: int = 3
    retry_backoff: float = 0.05
    refit: RefitPolicy = "pause"
    version: int = 0
    setup: tuple[Callable[[Any], Any], ...] = ()
    load_weights: Callable[[Any, int], Any] | None = None
    reduce: Callable[[ValueMesh[Any]], Any] | None = None
    env: Mapping[str, str] | None = None
    rate_window: float = 10.0
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


class ServiceCall:
    """A call to one endpoint of a service (loop thread only, see the module docstring).

    Attributes:
        endpoint: the endpoint's name.
        args, kwargs: its arguments (pickled again for each attempt).
        idempotent: the endpoint may run again after a replica failed under it.
        session: the sticky session it belongs to, if any.
        key: the routing key given to the router (the session's id for sessions).
        future: what the caller holds; resolved with an `Answer` (or the bare value).
        attempts: times it was sent so far.
        seq: its place in the order the service took calls (kept when it is moved).
        replica: the replica it is queued on or in flight on (None while pending).
    """

    __slots__ = (
        "answer",
        "args",
        "attempts",
        "endpoint",
        "future",
        "idempotent",
        "key",
        "kwargs",
        "replica",
        "seq",
        "session",
    )

    def __init__(
        self,
        endpoint: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        idempotent: bool,
        session: int | None,
        future: Future[Any],
        answer: bool,
    ) -> None:
        self.endpoint = endpoint
        self.args = args
        self.kwargs = kwargs
        self.idempotent = idempotent
        self.session = session
        self.key: Hashable | None = None
        self.future = future
        self.answer = answer  # resolve with the whole Answer, not just its value
        self.attempts = 0
        self.replica: Any = None
        self.seq = 0  # its place in the order calls reached the service

    @property
    def done(self) -> bool:
        """Whether the caller's future has its outcome (or was cancelled)."""
        return self.future.done()
