"""``choose``: send one call to one live rank, picked by a policy, with backpressure.

The policies themselves are pure (``_routing``); this module is the part that touches the
mesh's live state. Picking a rank and counting the call in flight happen as one step under
the mesh's ``choose_lock``, so concurrent callers never see a stale count and a rank never
exceeds its ``max_in_flight``.

When no rank has capacity (every live rank is at ``max_in_flight``, or a `WorkQueue` policy
says so), the call becomes a ticket in the mesh's FIFO ``waiting`` queue and its caller
gets a future at once. Every call that ends (``MeshState.finished``) wakes the queue, which
sends the tickets that can go now, oldest first: this is the pull-based work queue, where
an actor takes the next item as soon as it finishes one. Waiting cannot be forever while
anything is in flight, because at least one call must end for a rank to be full; a rank
that dies ends its calls too, and dead ranks are never picked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import ActorDiedError, CallTimeoutError, MeshBusyError
from .._hosts import Runtime
from .._pure import Affinity, ChoosePolicy, NoCapacity, WorkQueue, policy_from, takes_key
from ._future import Future

if TYPE_CHECKING:
    from ._mesh_state import MeshState

__all__ = ["ChooseSettings", "WhenFull", "submit"]

WhenFull = Literal["wait", "error"]

# Sends a call to a rank whose in-flight count was already raised at the given start time.
SendFn = Callable[[int, float], Future[Any]]


@dataclass(frozen=True)
class ChooseSettings:
    """How a mesh handle picks ranks for ``choose``; ``None`` fields defer to the mesh.

    Attributes:
        policy: a policy object or name; ``None``: the endpoint's, then the mesh's.
        max_in_flight: most calls a rank may have in flight before ``choose`` skips it.
        when_full: ``"wait"`` for capacity or ``"error"`` (``MeshBusyError``).
    """

    policy: ChoosePolicy | str | None = None
    max_in_flight: int | None = None
    when_full: WhenFull | None = None

    def __post_init__(self) -> None:
        check_limits(self.max_in_flight, self.when_full)
        if self.policy is not None:
            policy_from(self.policy)  # an unknown name fails here, not at the first choose


def check_limits(max_in_flight: int | None, when_full: str | None) -> None:
    """Validate ``max_in_flight`` and ``when_full`` as given by a user."""
    if max_in_flight is not None and (
        not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < 1
    ):
        raise ValueError(f"max_in_flight must be an int of at least 1, not {max_in_flight!r}")
    if when_full not in (None, "wait", "error"):
        raise ValueError(f"when_full must be 'wait' or 'error', not {when_full!r}")


def keyed(policy: ChoosePolicy, key: Hashable | None, affinity: Callable[[], Affinity]) -> Any:
    """The policy that routes a call with ``key``: an `Affinity` if ``policy`` ignores keys."""
    if key is not None and not takes_key(policy):
        return affinity()
    return policy


class _Ticket:
    """One ``choose`` call: where it may go, how to pick, and how to send it."""

    __slots__ = ("candidates", "future", "inner", "key", "limit", "mesh_name", "policy", "send")

    def __init__(
        self,
        mesh_name: str,
        candidates: Sequence[int],
        policy: ChoosePolicy,
        key: Hashable | None,
        limit: int | None,
        send: SendFn,
    ) -> None:
        self.mesh_name = mesh_name
        self.candidates = candidates
        self.policy = policy
        self.key = key
        self.limit = limit
        self.send = send
        self.future: Future[Any] | None = None  # only once it has to wait
        self.inner: Future[Any] | None = None

    def pick(self, state: MeshState) -> int | None:
        """A rank with capacity, or None; call with ``state.choose_lock`` held.

        Raises:
            ActorDiedError: every candidate is dead.
        """
        live = [rank for rank in self.candidates if rank not in state.dead]
        if not live:
            raise ActorDiedError(
                f"every actor of mesh '{self.mesh_name}' that choose may pick is dead"
            )
        loads = state.in_flight(live)
        if self.limit is not None:
            open_ranks = [(r, n) for r, n in zip(live, loads) if n < self.limit]
            if not open_ranks:
                return None
            live, loads = [r for r, _ in open_ranks], [n for _, n in open_ranks]
        try:
            return self.policy.choose(live, loads, self.key)
        except NoCapacity:
            return None

    def timed_out(self, timeout: float | None) -> BaseException:
        """The error of a wait that expired: queued here, or sent and not yet answered."""
        inner = self.inner
        if inner is not None and inner._on_timeout is not None:
            return inner._on_timeout(timeout)  # which actor it went to, what it is doing
        return CallTimeoutError(
            f"timed out after {timeout or 0:g} s: choose on mesh '{self.mesh_name}' was still "
            "waiting for an actor with capacity (nothing was sent yet: it goes out when an "
            "actor has room; future.cancel() drops it)"
        )


def submit(
    state: MeshState,
    mesh_name: str,
    candidates: Sequence[int],
    policy: ChoosePolicy,
    key: Hashable | None,
    limit: int | None,
    when_full: str,
    send: SendFn,
) -> Future[Any]:
    """Send one call to a rank picked by ``policy``, or queue it until one has capacity.

    ``send(rank, started)`` must send the call and return its future; the rank's in-flight
    count is already raised when it is called (the request must lower it when it ends).
    It raises ``ActorDiedError`` if the rank is found dead before anything was sent.

    Raises:
        ActorDiedError: every candidate is dead.
        MeshBusyError: no rank has capacity and ``when_full`` is ``"error"``.
    """
    ticket = _Ticket(mesh_name, candidates, policy, key, limit, send)
    with state.choose_lock:
        # Callers already waiting go first: a newcomer that would wait queues behind them
        # (the queue is drained below, so it still goes at once if it can). One that
        # would rather fail than wait goes now or not at all.
        if state.waiting and when_full != "error":
            picked = None
        else:
            picked = ticket.pick(state)
        if picked is not None:
            started = _reserve(state, picked)
        elif when_full == "error":
            raise MeshBusyError(_busy_message(mesh_name, limit, policy))
        else:
            _enqueue(state, ticket)
    if picked is not None:
        sent = _send(state, ticket, picked, started)
        if sent is not None:
            return sent
    _drain(state)
    assert ticket.future is not None
    return ticket.future


def _busy_message(mesh_name: str, limit: int | None, policy: ChoosePolicy) -> str:
    if limit is None and isinstance(policy, WorkQueue):
        limit = policy.capacity
    return (
        f"every live actor of mesh '{mesh_name}' has {limit} call(s) in flight "
        "(when_full='error'); retry later or let calls wait with when_full='wait'"
    )


def _reserve(state: MeshState, rank: int) -> float:
    return state.started((rank,))


def _enqueue(state: MeshState, ticket: _Ticket) -> None:
    """Put ``ticket`` at the back of the queue; call with ``state.choose_lock`` held."""
    if ticket.future is None:

        def cancel() -> None:
            inner = ticket.inner
            if inner is not None:
                inner.cancel()
                return
            with state.choose_lock:
                if ticket in state.waiting:
                    state.waiting.remove(ticket)

        ticket.future = Future._new(Runtime.get().in_loop_thread, ticket.timed_out, cancel)
    state.waiting.append(ticket)


class _Waker:
    """Drains a mesh's queue when a call ends (registered in ``capacity_waiters``)."""

    __slots__ = ("state",)

    def __init__(self, state: MeshState) -> None:
        self.state = state

    def __call__(self) -> None:
        _drain(self.state)


def _drain(state: MeshState) -> None:
    """Send every waiting ticket that can go now, oldest first."""
    ready: list[tuple[_Ticket, int, float]] = []
    failed: list[tuple[_Ticket, BaseException]] = []
    with state.choose_lock:
        if not state.waiting:
            return
        # Listen before looking: a call that ends during the scan then wakes us again, so
        # a freed slot is never missed.
        with state._lock:
            if not any(isinstance(w, _Waker) for w in state.capacity_waiters):
                state.capacity_waiters.append(_Waker(state))
        full: set[int] = set()  # keyless policies already found full in this scan
        keep = []
        for ticket in state.waiting:
            if ticket.key is None and id(ticket.policy) in full:
                keep.append(ticket)
                continue
            try:
                rank = ticket.pick(state)
            except Exception as error:
                failed.append((ticket, error))
                continue
            if rank is None:
                if ticket.key is None:
                    full.add(id(ticket.policy))
                keep.append(ticket)
                continue
            ready.append((ticket, rank, _reserve(state, rank)))
        state.waiting.clear()
        state.waiting.extend(keep)
    for ticket, problem in failed:
        assert ticket.future is not None
        ticket.future._set_exception(problem)
    for ticket, rank, started in ready:
        inner = _send(state, ticket, rank, started)
        outer = ticket.future
        if inner is None or inner is outer:
            continue  # queued again (its rank was dead, no other free), or failed
        assert outer is not None
        ticket.inner = inner
        inner.add_done_callback(functools.partial(_chain, outer=outer))


def _send(state: MeshState, ticket: _Ticket, rank: int, started: float) -> Future[Any] | None:
    """Send to ``rank``: the call's future, or None if the ticket had to queue again.

    A rank found dead before anything left is marked dead and another one is picked:
    nothing was delivered, so this keeps at-most-once delivery.
    """
    while True:
        try:
            return ticket.send(rank, started)
        except ActorDiedError as error:
            state.dead.setdefault(rank, error.reason or str(error))
            state.finished(rank, started, False)
        with state.choose_lock:
            try:
                picked = ticket.pick(state)
            except ActorDiedError as again:
                return _failed(ticket, again)
            if picked is None:
                _enqueue(state, ticket)
                return None
            rank, started = picked, _reserve(state, picked)


def _failed(ticket: _Ticket, error: BaseException) -> Future[Any]:
    future = ticket.future
    if future is None:
        future = Future._new()
    future._set_exception(error)
    return future


def _chain(inner: Future[Any], outer: Future[Any]) -> None:
    error = inner.exception()
    if error is not None:
        outer._set_exception(error)
    else:
        outer._set_result(inner.result())
