"""Calls to a whole mesh by its plan: one request for every rank, at the cost of one.

A call to a whole mesh behind a tree of host agents leaves this process as one frame per
child of it (``_hosts._cast_plan``). Its request must not undo that saving by following
each rank: so until something unusual happens it keeps a count of the ranks still to
answer, the values that came (a ``call``) or the runs of ranks each partial result
stands for (a ``reduce``), and counts the call in flight once for the whole mesh
(``MeshState.started_whole``). Anything else, an error from a rank, a lost connection
among the mesh's, a timeout, a stop, the caller giving up, turns it into an ordinary
request that follows every rank that has not answered (``_materialize``), and from then
on it behaves exactly as one, failure rules included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core import RECORDER, headers, loads, raised_error
from .._core import otel as _otel
from .._hosts import Runtime
from .._shape import run_ranks, runs_count
from ._requests import _Gather, _Reduce, _Request

if TYPE_CHECKING:
    from .._hosts import Plan
    from .._transport import Connection
    from ._actor_mesh import ActorMesh

__all__ = ["PlannedGather", "PlannedReduce", "by_plan", "may_plan"]


def may_plan(mesh: ActorMesh[Any]) -> bool:
    """Whether a call to ``mesh`` may go by a plan now (cheap: no lock, nothing made): not
    a slice, no dead rank, not stopped, tracing off, and not known to have no plan."""
    view = mesh._view_cache
    if view is None:
        view = mesh._message_view() or ()
    state = mesh._state
    if view != () or state.dead or state.stopped or _otel.ACTIVE:
        return False
    known = state.plan
    return known is None or known[2] is not None or known[0].topology != known[1]


def by_plan(mesh: ActorMesh[Any], send: Callable[[Plan], bool]) -> bool:
    """``send(plan)`` with the plan a call to the whole ``mesh`` goes by now (made again
    if the topology changed since it was); False when there is none or ``send`` says no.

    One lock per mesh holds from choosing the plan to the last frame of the call: calls
    from several threads then leave by the plan they chose in the order they chose it, so
    none goes out by a plan the agents have already replaced."""
    state = mesh._state
    with state.plan_lock:
        known = state.plan
        if known is not None and known[0].topology == known[1]:
            plan: Plan | None = known[2]
        else:
            runtime = Runtime.get()
            version = runtime.topology
            plan = runtime.cast_plans.make(mesh._ref.mesh_id, mesh._routes(), version)
            state.plan = (runtime, version, plan)
        return plan is not None and send(plan)


class _ByPlan(_Request):
    """What a request cast by plan does differently (see the module docstring); mixed in
    before ``_Gather`` or ``_Reduce``."""

    plan: Plan
    left = 0  # ranks still to answer, while not followed one by one
    whole_started = 0.0
    # Each rank's connection while it has not answered; None: not followed one by one.
    _out: dict[int, Connection | None] | None = None

    @property
    def outstanding(self) -> dict[int, Connection | None]:
        out = self._out
        return out if out is not None else self._materialize()

    @outstanding.setter
    def outstanding(self, value: dict[int, Connection | None]) -> None:
        self._out = value

    def send_planned(self, plan: Plan, *, parts: list[Any]) -> bool:
        """Send the call by ``plan``; False (nothing sent) when it must go process by
        process after all: an idempotent endpoint (resent per process), a reply route
        to a process on this host, large parts that go down a chain of agents of one
        level, or a process lost since the plan was made."""
        if self.resend is not None or (self.route is not None and not plan.tcp):
            return False
        if plan.by_chain(parts):
            return False
        runtime, state = self.runtime, self.state
        self.plan = plan
        self.left = plan.count
        self.whole_started = state.started_whole()
        self._out = None
        # (noted before it is registered: see ``_Request.send``)
        self.routed_at = plan.version  # (its branches are the tree's as it was then)
        self.req_id = runtime.register(self)
        if runtime.topology != plan.version:
            runtime.forget(self.req_id)
            state.whole_to_ranks(self.whole_started, (), ())
            self._out = {}
            return False
        if RECORDER.on:
            self.sent_at = time.monotonic()
        for ranks, reason in plan.cast(
            self.req_id, self.endpoint, parts, gather=self.req_id, combine=self.combine
        ):
            runtime.call_soon(self._fail_unreachable, ranks, reason)
        return True

    def _answered_ranks(self) -> set[int]:
        """The ranks that answered (while not followed one by one)."""
        raise NotImplementedError

    def _materialize(self) -> dict[int, Connection | None]:
        """Follow every rank that has not answered, one by one, from now on (loop
        thread)."""
        answered = self._answered_ranks()
        out = self._waiting(answered)
        self.state.whole_to_ranks(self.whole_started, answered, out)
        self.started = dict.fromkeys(out, self.whole_started)
        self._out = out
        return out

    def _done(self) -> bool:
        """Every rank answered, none followed one by one."""
        self.state.finished_whole(self.whole_started, not self.failed)
        self._out = {}
        self._completed()
        return True

    def _unplanned(self, parts: list[memoryview]) -> bool:
        """An agent did not know the plan the call went by (never expected: plans go
        down ahead of their casts, one mesh's casts one at a time): the call fails with
        its error at once rather than wait for ranks nobody called."""
        error = raised_error(parts[0])
        out, started = self.outstanding, self.started
        ranks = tuple(out)
        out.clear()
        for rank in ranks:  # (counted out of flight before the caller hears of it)
            since = started.pop(rank, None)
            if since is not None:
                self.state.finished(rank, since, False)
        for rank in ranks:
            self._error(rank, error)
        self._completed()
        return True

    def on_lost(self, conn: Connection, reason: str) -> bool:
        if self._out is None:
            if id(conn) not in self.plan.conns:
                return False
            self._materialize()
        return super().on_lost(conn, reason)

    def _pending(self) -> dict[int, Connection | None]:
        if self._out is not None:
            return super()._pending()
        # Read from the waiting thread while the loop may add answers: retry a torn read.
        while True:
            try:
                return self._waiting(self._answered_ranks())
            except RuntimeError:
                continue

    def _waiting(self, answered: set[int]) -> dict[int, Connection | None]:
        """Each rank not ``answered``, with the connection its answer comes on."""
        return {
            rank: conn
            for _, conn, ranks in self.plan.routes
            for rank in ranks
            if rank not in answered
        }


class PlannedGather(_ByPlan, _Gather):
    """``call`` to a whole mesh, by its plan."""

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if rank == headers.UNPLANNED:
            return self._unplanned(parts)
        if self._out is None and ok and rank >= 0:
            values = self.values
            if rank in values:
                return False  # (said twice: the first answer stands)
            try:
                value = loads(parts[0], parts[1:])
            except Exception:
                pass  # followed one by one, the error is told as ever
            else:
                values[rank] = value
                self.left -= 1
                return False if self.left else self._done()
        if self._out is None:
            self._materialize()
        return super().on_reply(rank, ok, parts)

    def _answered_ranks(self) -> set[int]:
        return set(self.values) | set(self.deaths)


class PlannedReduce(_ByPlan, _Reduce):
    """``reduce`` of a whole mesh, by its plan: each child of this process answers with
    one partial result, the runs of ranks it stands for counted without listing them."""

    def __init__(self, mesh: ActorMesh[Any], endpoint: str, combine: Any) -> None:
        super().__init__(mesh, endpoint, combine)
        self.covered: list[Any] = []  # the runs of ranks of each partial result

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if rank == headers.UNPLANNED:
            return self._unplanned(parts)
        if self._out is None and rank == headers.PARTIAL:
            try:
                runs, value = loads(parts[0], parts[1:])
            except Exception:
                pass  # followed one by one, the call fails as ever
            else:
                self.covered.append(runs)
                self.left -= runs_count(runs)
                self._value(headers.PARTIAL, value)
                return False if self.left > 0 else self._done()
        if self._out is None:
            self._materialize()
        return super().on_reply(rank, ok, parts)

    def _answered_ranks(self) -> set[int]:
        return {rank for runs in self.covered for rank in run_ranks(runs)}
