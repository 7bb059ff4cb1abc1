"""What this process knows of an actor mesh: liveness, load, and unhandled failures.

Mesh handles are cheap values (slices and pickled copies abound); the mutable facts about
a mesh live here, one ``MeshState`` per mesh id per process, shared by every handle.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import MeshStoppedError, SupervisionError

__all__ = [
    "DEATHS",
    "DEFAULT_STOP_REASON",
    "Failure",
    "MeshState",
    "all_states",
    "fresh_state",
    "state_of",
]

# Failure kinds after which the ranks are gone for good (not restarted): a process died;
# an actor's ``__init__`` raised ("init");
# an endpoint raised with no caller to answer ("broadcast"), an endpoint ended its actor
# (a ``BaseException``, ``abort()``, or raising past its response port: "ended"), or an
# owner did not handle a failure of a mesh it owns ("unhandled"), after which, as in
# Monarch, the actor is dropped.
DEATHS = frozenset({"died", "restart_failed", "broadcast", "ended", "unhandled", "init"})

_LATENCY_WINDOW = 1024
# Monarch's ``stop()`` reason when none is given; errors do not repeat it.
DEFAULT_STOP_REASON = "stopped by client"


@dataclass(frozen=True)
class Failure:
    """A failure of an actor mesh that its owner must hear about (Monarch's
    ``MeshFailure``: ``mesh_name``, ``crashed_ranks`` and ``report()`` too).

    Attributes:
        mesh: name of the mesh.
        ranks: root ranks affected.
        kind: "died", "broadcast" (an endpoint called with broadcast raised), "ended" (an
            endpoint ended its actor), ...
        error: the exception describing it.
        actor: the (first) failed actor's qualified name, as Monarch writes it
            (``<root>.<train.Trainer trainer{'gpus': 0/2}>``), when known.
        cause: what happened to it, in Monarch's words ("the process this actor was
            running on failed: Killed(sig=9)"), when known.
    """

    mesh: str
    ranks: tuple[int, ...]
    kind: str
    error: BaseException
    actor: str = ""
    cause: str = ""

    @property
    def mesh_name(self) -> str:
        """The name of the failed mesh."""
        return self.mesh

    @property
    def crashed_ranks(self) -> list[int]:
        """The ranks the failure concerns."""
        return list(self.ranks)

    def report(self) -> str:
        """What happened, in words, as Monarch reports it: which actor failed (and with it
        every actor it spawned), then why."""
        who = self.actor or f"of mesh '{self.mesh}'"
        cause = self.cause or f"{self.kind}: {self.error}"
        ranks = f" (ranks {list(self.ranks)})" if len(self.ranks) > 1 else ""
        return f"The actor {who}{ranks} and all its descendants have failed:\n  {cause}"

    def __str__(self) -> str:
        ranks = list(self.ranks)
        return f"MeshFailure(mesh_name={self.mesh}, crashed_ranks={ranks}, event={self.error})"


@dataclass
class _RankStats:
    in_flight: int = 0
    completed: int = 0
    failed: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))


def stopped_event(state: MeshState) -> str:
    """How Monarch words a call to a stopped mesh, for programs that match on it."""
    return f"Supervision event: actor {state.name} has status: stopped"


class MeshState:
    """Process-local facts about one mesh id (see the module docstring)."""

    def __init__(self, mesh_id: str, name: str, paths: tuple[str, ...]) -> None:
        self.mesh_id = mesh_id
        self.name = name
        self.paths = paths
        self.stopped = False
        self.stop_reason = ""  # " (why)", from ``stop(reason)``, for the errors of calls
        # The spawn's future (its __init__ calls), and the ranks whose __init__ raised,
        # with what (calls that include one raise it; the other ranks serve on).
        self.initialized: Any = None
        self.init_errors: dict[int, BaseException] = {}
        self.choose: Any = "power_of_two"
        self.dead: dict[int, str] = {}
        self.unhandled: list[Failure] = []
        # The actor that spawned the mesh, as (its mesh id, its rank), when one did in this
        # process: its __supervise__ hears of the mesh's failures first (see _supervision).
        self.owner: tuple[str, int] | None = None
        self._lock = threading.Lock()
        # Each rank's figures, then (last) those of calls to the whole mesh cast by plan
        # (_planned), counted once for every rank: a rank's figures are its own plus these.
        self._ranks = [_RankStats() for _ in range(len(paths) + 1)]
        self._whole = self._ranks[-1]
        # Called once each, on the thread that finished a call, after the next call ends;
        # `choose` registers here while callers wait for a rank with capacity.
        self.capacity_waiters: list[Any] = []
        # `choose` defaults for every handle of the mesh in this process (set by
        # `actor_mesh()`), its queue of callers waiting for capacity, and the lock that
        # makes picking a rank and counting the call in flight one step.
        self.max_in_flight: int | None = None
        self.when_full = "wait"
        self.waiting: deque[Any] = deque()
        self.choose_lock = threading.Lock()
        # What to stop with the mesh: the processes `actor_mesh()` started for it.
        self.owned: Any = None
        # The leased job whose record of the mesh a stop removes (see _leased_job).
        self.job: Any = None
        # For failure reports: the mesh's reference (class, dimensions) and who spawned it.
        self.ref: Any = None
        self.creator: Any = None
        self._named_policies: dict[tuple[str, str], Any] = {}
        # How calls to the whole mesh are cast, by plan (_planned): (the runtime, its
        # topology count then, the plan or None); the lock under which a plan is made,
        # kept, taught and cast by, so no thread casts by one the agents replaced.
        self.plan: tuple[Any, int, Any] | None = None
        self.plan_lock = threading.Lock()

    def note_stop(self, reason: str) -> None:
        """Remember why the mesh is being stopped (the first stop's reason, when it is not
        Monarch's default), for the errors of calls to it."""
        if not self.stopped and reason and reason != DEFAULT_STOP_REASON:
            self.stop_reason = f" ({reason})"

    def check_usable(self, ranks: tuple[int, ...] | list[int]) -> None:
        """Raise if a call to ``ranks`` may not go out: the mesh was stopped, or one of
        them has a failure nobody handled (see ``_supervision`` for the rule)."""
        if self.init_errors:
            for rank in ranks:
                error = self.init_errors.get(rank)
                if error is not None:
                    raise error
        if self.stopped:
            raise MeshStoppedError(
                f"actor mesh '{self.name}' was stopped{self.stop_reason} ({stopped_event(self)})"
            )
        if not self.unhandled:
            return
        for failure in self.unhandled:
            if any(rank in ranks for rank in failure.ranks):
                break
        else:
            return
        if failure.kind not in DEATHS:
            self.unhandled.remove(failure)  # the actor lives on: said once is enough
        # Each failure is told in full once; the call's other failed ranks are named.
        others = sorted(
            {
                rank
                for other in self.unhandled
                if other is not failure and other.kind in DEATHS
                for rank in other.ranks
                if rank in ranks and rank not in failure.ranks
            }
        )
        also = f" (ranks {others} of this call failed too)" if others else ""
        raise SupervisionError(
            f"unhandled failure of actor mesh '{self.name}' ({failure.kind}, ranks "
            f"{list(failure.ranks)}){also}: {failure.error}",
            failure,
        ) from failure.error

    # -- load ---------------------------------------------------------------------------

    def in_flight(self, ranks: tuple[int, ...] | list[int]) -> list[int]:
        """The caller's outstanding calls to each of ``ranks``."""
        stats, whole = self._ranks, self._whole.in_flight
        if whole:
            return [stats[r].in_flight + whole for r in ranks]
        return [stats[r].in_flight for r in ranks]

    def started(self, ranks: tuple[int, ...]) -> float:
        """Count a call to each of ``ranks`` as in flight; returns its start time."""
        stats = self._ranks
        with self._lock:
            for rank in ranks:
                stats[rank].in_flight += 1
        return time.perf_counter()

    def finished(self, rank: int, started: float, ok: bool) -> None:
        """The call to ``rank`` begun at ``started`` ended."""
        elapsed = time.perf_counter() - started
        with self._lock:
            stats = self._ranks[rank]
            stats.in_flight -= 1
            if ok:
                stats.completed += 1
            else:
                stats.failed += 1
            stats.latencies.append(elapsed)
            waiters, self.capacity_waiters = self.capacity_waiters, []
        for wake in waiters:
            wake()

    def started_whole(self) -> float:
        """Count a call to every rank as in flight, at the cost of one (a cast by plan);
        returns its start time."""
        with self._lock:
            self._whole.in_flight += 1
        return time.perf_counter()

    def finished_whole(self, started: float, ok: bool) -> None:
        """The call to every rank begun at ``started_whole`` ended."""
        self.finished(-1, started, ok)  # (the last figures are the whole mesh's)

    def whole_to_ranks(self, started: float, answered: Any, waiting: Any) -> None:
        """A call to every rank is followed rank by rank from now on: ``answered`` did,
        ``waiting`` are in flight (``finished`` ends each)."""
        elapsed = time.perf_counter() - started
        stats = self._ranks
        with self._lock:
            self._whole.in_flight -= 1
            for rank in answered:
                stats[rank].completed += 1
                stats[rank].latencies.append(elapsed)
            for rank in waiting:
                stats[rank].in_flight += 1

    def named_policy(self, name: str, endpoint: str, make: Callable[[str], Any]) -> Any:
        """The policy called ``name`` for ``endpoint``, made by ``make(name)`` on first use."""
        key = (name, endpoint)
        policy = self._named_policies.get(key)
        if policy is None:
            with self._lock:
                policy = self._named_policies.setdefault(key, make(name))
        return policy

    def stats(self) -> dict[int, dict[str, Any]]:
        """Per rank: in flight, completed, failed and latency percentiles (seconds)."""
        report = {}
        with self._lock:
            whole = self._whole
            for rank, stats in enumerate(self._ranks[:-1]):
                ordered = sorted([*stats.latencies, *whole.latencies])
                report[rank] = {
                    "in_flight": stats.in_flight + whole.in_flight,
                    "completed": stats.completed + whole.completed,
                    "failed": stats.failed + whole.failed,
                    "alive": rank not in self.dead,
                    "p50": _percentile(ordered, 0.5),
                    "p90": _percentile(ordered, 0.9),
                    "p99": _percentile(ordered, 0.99),
                }
        return report


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


_STATES: dict[str, MeshState] = {}
_STATES_LOCK = threading.Lock()


def state_of(mesh_id: str, name: str, paths: tuple[str, ...]) -> MeshState:
    """The state of ``mesh_id`` in this process, created on first use."""
    state = _STATES.get(mesh_id)
    if state is None:
        with _STATES_LOCK:
            state = _STATES.get(mesh_id)
            if state is None:
                state = _STATES[mesh_id] = MeshState(mesh_id, name, paths)
    return state


def fresh_state(mesh_id: str, name: str, paths: tuple[str, ...]) -> MeshState:
    """A new state for mesh ``mesh_id``, replacing any: a controller attaching again to
    a leased job it had detached from starts over with the mesh (not stopped)."""
    with _STATES_LOCK:
        state = _STATES[mesh_id] = MeshState(mesh_id, name, paths)
    return state


def all_states() -> list[MeshState]:
    """Every mesh this process has a handle on."""
    return list(_STATES.values())
