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
from typing import TYPE_CHECKING, Any

from .._core import RECORDER, headers, loads
from .._core import otel as _otel
from .._hosts import Runtime
from .._shape import run_ranks, runs_count
from ._requests import _Gather, _Reduce, _Request

if TYPE_CHECKING:
    from .._hosts import Plan
    from .._transport import Connection
    from ._actor_mesh import ActorMesh

__all__ = ["PlannedGather", "PlannedReduce", "plan_for"]


def plan_for(mesh: ActorMesh[Any]) -> Plan | None:
    """The plan a call to ``mesh`` goes by now; ``None``: it goes process by process
    (a slice, a mesh not behind a tree of agents, one with dead or restarting ranks,
    tracing on)."""
    view = mesh._view_cache
    if view is None:
        view = mesh._message_view() or ()
    state = mesh._state
    if view != () or state.dead or state.stopped or _otel.ACTIVE:
        return None
    known = state.plan
    if known is not None and known[0].topology == known[1]:
        plan: Plan | None = known[2]
        return plan
    runtime = Runtime.get()
    version = runtime.topology
    plan = runtime.cast_plans.make(mesh._ref.mesh_id, mesh._routes(), version)
    state.plan = (runtime, version, plan)
    return plan


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

    def send_planned(self, plan: Plan, parts: list[Any]) -> bool:
        """Send the call by ``plan``; False (nothing sent) when it must go process by
        process after all: an idempotent endpoint (resent per process), a reply route
        to a process on this host, or a process lost since the plan was made."""
        if self.resend is not None or (self.route is not None and not plan.tcp):
            return False
        runtime, state = self.runtime, self.state
        self.plan = plan
        self.left = plan.count
        self.whole_started = state.started_whole()
        self._out = None
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
        out: dict[int, Connection | None] = {
            rank: conn
            for _, conn, ranks in self.plan.routes
            for rank in ranks
            if rank not in answered
        }
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
                answered = self._answered_ranks()
                break
            except RuntimeError:
                continue
        return {
            rank: conn
            for _, conn, ranks in self.plan.routes
            for rank in ranks
            if rank not in answered
        }


class PlannedGather(_ByPlan, _Gather):
    """``call`` to a whole mesh, by its plan."""

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
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
