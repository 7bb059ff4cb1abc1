"""The engine of a service: routing, failure as a unit, retries, refits and scaling.

Everything here runs on the runtime's loop thread, so the state (replicas, queues,
sessions, versions) has one writer and needs no lock; the public face (``_service``)
posts calls here with ``Runtime.call_soon`` and hands back futures.

Where a call can be, and what moves it:

- ``pending``: no replica may take it now (none serving, or a "pause" refit is under
  way). Flushed whenever a replica comes into service or the refit ends; failed with
  `ServiceUnavailableError` only when no replica is serving or coming back.
- a replica's ``queue``: routed there, not sent. When the replica fails, drains or leaves
  rotation for a rolling refit, its queued calls are routed again (nothing was sent, so
  this cannot run anything twice).
- a replica's ``in_flight``: sent. When the replica fails, a call of an idempotent
  endpoint is routed again (at once the first time, then after a doubling backoff), up to
  ``max_attempts`` sends; any other fails with `ReplicaFailedError` naming the replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import weakref
from collections import Counter, deque
from typing import Any

from .._exceptions import (
    ActorDiedError,
    MeshStoppedError,
    ReplicaFailedError,
    ServiceUnavailableError,
    SupervisionError,
)
from .._hosts import Runtime
from .._shape import Shape, ValueMesh
from ._future import Future
from ._mesh_state import Failure, MeshState, state_of
from ._service_call import RefitPolicy, ServiceCall, ServiceSettings
from ._service_replica import Replica, settle
from ._service_values import Answer, ReplicaStats
from ._supervision import report

__all__ = ["ServiceCore", "live_services"]

log = logging.getLogger("actormesh.service")

# Errors of a call that say its replica is broken, not that the endpoint raised.
_BROKEN = (ActorDiedError, MeshStoppedError, SupervisionError)
_COMING_BACK = ("starting", "restarting", "refitting")
_PLACED = ("starting", "serving", "refitting", "restarting", "draining")

# Every service of this process, for ``actormesh top`` (weak: a service nobody holds and
# that is stopped leaves no trace).
_LIVE: weakref.WeakSet[ServiceCore] = weakref.WeakSet()


def live_services() -> list[ServiceCore]:
    """The services of this process not stopped yet, by name (loop thread)."""
    return sorted((core for core in _LIVE if not core.stopped), key=lambda core: core.name)


class ServiceCore:
    """The loop-thread side of one service (see the module docstring)."""

    def __init__(self, name: str, actor_class: type, settings: ServiceSettings) -> None:
        self.name = name
        self.actor_class = actor_class
        self.settings = settings
        self.runtime = Runtime.get()
        self.replicas: dict[int, Replica] = {}
        self.pending: deque[ServiceCall] = deque()
        self.sessions: dict[int, int] = {}  # session id -> replica index
        self.version = settings.version
        self.paused = False  # a "pause" refit is asked for or under way
        self._pauses = 0
        self.stopped = False
        self._next_index = 0
        self._next_session = 0
        self._submitted = 0  # calls taken, numbering them in arrival order
        self._refits: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._settled: list[asyncio.Future[None]] = []  # wait_serving's callers
        # Where the controller hears of a replica spent beyond its restart budget.
        self._state: MeshState = state_of(f"service-{name}-{id(self):x}", name, ())
        _LIVE.add(self)

    # -- building ---------------------------------------------------------------------

    async def start(self, count: int) -> None:
        """Build ``count`` replicas at once; raise the first error (after stopping all)."""
        added = [self._new_replica() for _ in range(count)]
        results = await asyncio.gather(*(self._build(r) for r in added), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            raise errors[0]

    def _new_replica(self) -> Replica:
        replica = Replica(self._next_index, self.settings)
        self._next_index += 1
        self.replicas[replica.index] = replica
        return replica

    async def _build(self, replica: Replica) -> None:
        host = self._place(replica)
        await replica.build(self.name, self.actor_class, self._replica_failed, self._version, host)
        if replica.state not in ("starting", "restarting") or self.stopped:
            await replica.kill("the service was stopped or scaled down")
            return
        replica.state = "serving"
        self._notify()
        self._rebalance()
        log.info("service '%s': replica %d serving version %s", self.name, replica.index,
                 replica.version)  # fmt: skip
        self._flush_pending()
        self._pump(replica)

    def _stopped_error(self) -> ServiceUnavailableError:
        return ServiceUnavailableError(f"service '{self.name}' was stopped")

    def _place(self, replica: Replica) -> Any:
        """The host for ``replica``'s processes: of the service's hosts whose agent is
        alive, one with the fewest replicas (``None``: this host, without a host mesh)."""
        hosts = self.settings.hosts
        if hosts is None:
            return None
        links = hosts._hosts.links
        live = [h for h in hosts._shape.ranks if links[h] is None or links[h].lost_reason is None]
        if not live:
            raise ServiceUnavailableError(f"service '{self.name}': every host it may use is gone")
        used = Counter(
            r.host for r in self.replicas.values() if r is not replica and r.state in _PLACED
        )
        replica.host = min(live, key=lambda h: (used[h], h))
        return hosts._with_shape(Shape((), (), (replica.host,)))

    def _version(self) -> int:
        return self.version

    # -- routing ------------------------------------------------------------------------

    def submit(self, call: ServiceCall) -> None:
        """Take a new call from the public face."""
        if self.stopped:
            call.future._set_exception(self._stopped_error())
            return
        if call.session is not None:
            call.key = call.session
        self._submitted += 1
        call.seq = self._submitted
        self._route(call)

    def cancel(self, call: ServiceCall) -> None:
        """The caller gave ``call`` up: drop it wherever it waits unsent."""
        replica = call.replica
        if replica is not None and call in replica.queue:
            replica.queue.remove(call)
        elif call in self.pending:
            self.pending.remove(call)

    def _route(self, call: ServiceCall) -> None:
        call.replica = None
        if call.done:
            return  # cancelled by its caller
        if self.stopped:
            call.future._set_exception(self._stopped_error())
            return
        target = self._sticky(call)
        if target is None:
            serving = [r for r in self.replicas.values() if r.state == "serving"]
            if self.paused or not serving:
                self._wait_or_fail(call)
                return
            indices = [r.index for r in serving]
            picked = self.settings.router.choose(indices, [r.load for r in serving], call.key)
            if picked not in self.replicas:
                call.future._set_exception(
                    ValueError(f"the router of service '{self.name}' picked {picked!r}, "
                               f"which is not one of the replicas offered ({indices})")
                )  # fmt: skip
                return
            target = self.replicas[picked]
            if call.session is not None:
                self.sessions[call.session] = target.index
        call.replica = target
        _enqueue(target.queue, call)
        self._pump(target)

    def _sticky(self, call: ServiceCall) -> Replica | None:
        """The replica a session's call goes to: its own while that one lives."""
        if call.session is None:
            return None
        index = self.sessions.get(call.session)
        replica = self.replicas.get(index) if index is not None else None
        # A replica out of rotation for a refit is still the session's: its call waits.
        if replica is not None and replica.state in ("serving", "refitting"):
            return replica
        return None

    def _wait_or_fail(self, call: ServiceCall) -> None:
        coming = any(r.state in _COMING_BACK for r in self.replicas.values())
        if self.paused or coming:
            self.pending.append(call)
            return
        call.future._set_exception(
            ServiceUnavailableError(
                f"service '{self.name}' has no replica to serve '{call.endpoint}': "
                + self._why_none()
            )
        )

    def _why_none(self) -> str:
        if not self.replicas:
            return "it has no replicas (scale it up)"
        states = ", ".join(f"{r.index}: {r.state}" for r in self.replicas.values())
        return f"every replica failed beyond its restart budget ({states})"

    def _rebalance(self) -> None:
        """Route again the calls queued on serving replicas (none was sent), oldest first:
        a replica that just came into service takes its share of work already waiting."""
        waiting: list[ServiceCall] = []
        for replica in self.replicas.values():
            if replica.state == "serving":
                keep = deque(c for c in replica.queue if c.session is not None)
                waiting.extend(c for c in replica.queue if c.session is None)
                replica.queue = keep
        waiting.sort(key=lambda call: call.seq)
        for call in waiting:
            self._route(call)

    def _flush_pending(self) -> None:
        waiting, self.pending = self.pending, deque()
        for call in waiting:
            self._route(call)

    def _pump(self, replica: Replica) -> None:
        """Send the replica's queued calls while it has slots."""
        limit = self.settings.max_in_flight
        while (
            replica.state == "serving"
            and not self.paused
            and replica.queue
            and len(replica.in_flight) < limit
        ):
            call = replica.queue.popleft()
            if not call.done:
                self._send(replica, call)

    def _send(self, replica: Replica, call: ServiceCall) -> None:
        call.attempts += 1
        attempt = call.attempts
        replica.in_flight.add(call)
        version = replica.version
        try:
            future = getattr(replica.actors, call.endpoint).call(*call.args, **call.kwargs)
        except Exception as error:
            self._outcome(replica, call, attempt, version, None, error)
            return

        def done(finished: Future[Any]) -> None:
            error = finished.exception()
            value = None if error is not None else finished.result()
            self.runtime.call_soon(self._outcome, replica, call, attempt, version, value, error)

        future.add_done_callback(done)

    def _outcome(
        self,
        replica: Replica,
        call: ServiceCall,
        attempt: int,
        version: int | None,
        value: ValueMesh[Any] | None,
        error: BaseException | None,
    ) -> None:
        if call.replica is not replica or call.attempts != attempt or call not in replica.in_flight:
            return  # an earlier attempt, already accounted for when its replica failed
        if error is None:
            assert value is not None
            replica.ended(call, True)
            try:
                result = self._reduce(value)
            except Exception as failure:
                call.future._set_exception(failure)
            else:
                answer = Answer(result, version if version is not None else self.version,
                                replica.index, attempt)  # fmt: skip
                call.future._set_result(answer if call.answer else result)
            self._pump(replica)
            return
        if isinstance(error, _BROKEN):
            self._replica_failed(replica, str(error))
            return
        if math.prod(self.settings.per_replica.values()) > 1 and replica.state == "serving":
            # One rank's error may be a peer's death seen first through a collective:
            # ask every rank before blaming the endpoint.
            self._spawn(self._check_then_fail(replica, call, error))
            return
        replica.ended(call, False)
        call.future._set_exception(error)
        self._pump(replica)

    async def _check_then_fail(
        self, replica: Replica, call: ServiceCall, error: BaseException
    ) -> None:
        alive = await replica.probe()
        if call not in replica.in_flight:
            return  # the replica failed meanwhile, and took the call with it
        if not alive:
            self._replica_failed(replica, f"a rank stopped answering after: {error}")
            return
        replica.ended(call, False)
        call.future._set_exception(error)
        self._pump(replica)

    def _reduce(self, values: ValueMesh[Any]) -> Any:
        reduce = self.settings.reduce
        if reduce is not None:
            return reduce(values)
        return values.values()[0]

    # -- failure as a unit --------------------------------------------------------------

    def _replica_failed(self, replica: Replica, reason: str) -> None:
        """A rank of ``replica`` died (or it broke): out of rotation at once, its calls
        moved or failed, its processes killed and built again (see the module doc)."""
        if replica.state not in ("serving", "refitting", "draining", "starting"):
            return  # already being dealt with
        draining = replica.state == "draining"
        replica.state = "stopped" if draining else "restarting"
        log.warning("service '%s': replica %d failed (%s)", self.name, replica.index, reason)
        for session, index in list(self.sessions.items()):
            if index == replica.index:
                del self.sessions[session]  # the conversation moves on its next call
        queued, replica.queue = list(replica.queue), deque()
        for call in replica.drop_in_flight():
            self._retry_or_fail(replica, call, reason)
        for call in queued:
            self._route(call)
        if not draining:
            self._spawn(self._restart(replica, reason))

    def _retry_or_fail(self, replica: Replica, call: ServiceCall, reason: str) -> None:
        call.replica = None
        settings = self.settings
        if call.idempotent and call.attempts < settings.max_attempts:
            # The first resend goes at once (it goes to another replica: this one is out
            # of rotation); further ones back off, doubling, as failures then cascade.
            if call.attempts == 1:
                self._route(call)
            else:
                delay = settings.retry_backoff * 2 ** (call.attempts - 2)
                self.runtime.loop.call_later(delay, self._route, call)
            return
        if call.idempotent:
            why = f"it was sent {call.attempts} times (max_attempts={settings.max_attempts})"
        else:
            why = f"'{call.endpoint}' is not marked idempotent, so it was not run again"
        call.future._set_exception(
            ReplicaFailedError(
                f"replica {replica.index} of service '{self.name}' failed while "
                f"'{call.endpoint}' ran on it ({reason}); {why}",
                service=self.name,
                replica=replica.index,
                reason=reason,
            )
        )

    async def _restart(self, replica: Replica, reason: str) -> None:
        await replica.kill(f"replica {replica.index} of service '{self.name}' is rebuilt")
        while not self.stopped and replica.state == "restarting":
            if not replica.may_restart():
                self._gave_up(replica, reason)
                return
            log.warning("service '%s': rebuilding replica %d (restart %d)", self.name,
                        replica.index, replica.restarts)  # fmt: skip
            try:
                await self._build(replica)
                return
            except Exception as error:
                reason = f"its rebuild failed: {error}"
                log.warning("service '%s': replica %d %s", self.name, replica.index, reason)
                await replica.kill(reason)

    def _gave_up(self, replica: Replica, reason: str) -> None:
        replica.state = "failed"
        why = f"replica {replica.index} of service '{self.name}' failed ({reason}); " + (
            f"not rebuilt: {replica.budget_note()}"
        )
        log.error("%s", why)
        error = ActorDiedError(why, reason=reason)
        report(self._state, Failure(self.name, (replica.index,), "restart_failed", error))
        self._notify()
        # Calls waiting for a replica to come back wait no more if none will.
        self._flush_pending()

    # -- refits -------------------------------------------------------------------------

    def begin_refit(self, version: int, policy: RefitPolicy, done: Future[int]) -> None:
        """Start bringing every replica to ``version`` (see `RefitPolicy`); ``done``
        resolves when it is there. A "pause" holds new calls from this moment, so a call
        made after ``update_weights`` returned runs on the new weights. Refits run one at
        a time, in the order they were asked for."""
        if policy == "pause":
            self._pauses += 1
            self.paused = True
        self._spawn(self._refit(version, policy, done))

    async def _refit(self, version: int, policy: RefitPolicy, done: Future[int]) -> None:
        if self._refits is None:
            self._refits = asyncio.Lock()
        try:
            async with self._refits:
                self.version = version  # what any replica (re)built from now on loads
                if policy == "pause":
                    await self._refit_paused(version)
                else:
                    await self._refit_rolling(version)
        except BaseException as error:
            done._set_exception(error)
            raise
        done._set_result(version)

    async def _refit_paused(self, version: int) -> None:
        try:
            group = [r for r in self.replicas.values() if r.state == "serving"]
            for replica in group:
                replica.state = "refitting"
            await asyncio.gather(*(r.wait_idle() for r in group))
            await asyncio.gather(*(self._load(r, version) for r in group))
        finally:
            self._pauses -= 1
            self.paused = self._pauses > 0
        self._flush_pending()
        for replica in list(self.replicas.values()):
            self._pump(replica)

    async def _refit_rolling(self, version: int) -> None:
        for replica in list(self.replicas.values()):
            if replica.state != "serving" or replica.version == version:
                continue  # one being (re)built loads the new version itself
            replica.state = "refitting"
            # What it holds unsent goes where it is served now, except a session's.
            kept = [c for c in replica.queue if c.session is not None]
            moved = [c for c in replica.queue if c.session is None]
            replica.queue = deque(kept)
            for call in moved:
                self._route(call)
            await replica.wait_idle()
            await self._load(replica, version)

    async def _load(self, replica: Replica, version: int) -> None:
        """Load ``version`` into a refitting replica and put it back in rotation; a load
        that fails breaks the replica (it is rebuilt, and loads the version then)."""
        if replica.state != "refitting":
            return  # it failed while draining; its rebuild loads the version
        try:
            if self.settings.load_weights is not None:
                await settle(self.settings.load_weights(replica.actors, version))
        except Exception as error:
            self._replica_failed(replica, f"loading weights version {version} failed: {error}")
            return
        if replica.state != "refitting":
            return
        replica.version = version
        replica.state = "serving"
        self._notify()
        self._flush_pending()
        self._pump(replica)

    # -- scaling, stats, stopping -------------------------------------------------------

    def begin_scale(self, count: int, done: Future[None]) -> None:
        """Add replicas, or drain and remove some, until ``count`` are kept; ``done``
        resolves when they are. The change starts now: a call made after ``scale``
        returned never goes to a replica being removed."""
        kept = [r for r in self.replicas.values() if r.state not in ("draining", "stopped")]
        if count > len(kept):
            added = [self._new_replica() for _ in range(count - len(kept))]
            work = [self._build(r) for r in added]
        else:
            # Failed replicas go first, then the newest.
            ordered = sorted(kept, key=lambda r: (r.state != "failed", -r.index))
            work = [self._drain(r) for r in ordered[: len(kept) - count]]
        self._spawn(self._finish(work, done))

    async def _finish(self, work: list[Any], done: Future[None]) -> None:
        results = await asyncio.gather(*work, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            done._set_exception(errors[0])
        else:
            done._set_result(None)

    def _drain(self, replica: Replica) -> Any:
        """Take ``replica`` out of rotation now; the coroutine that finishes its calls in
        flight and stops it."""
        was = replica.state
        replica.state = "draining"
        for session, index in list(self.sessions.items()):
            if index == replica.index:
                del self.sessions[session]
        queued, replica.queue = list(replica.queue), deque()
        for call in queued:
            self._route(call)
        return self._drained(replica, was in ("serving", "refitting"))

    async def _drained(self, replica: Replica, busy: bool) -> None:
        if busy:
            await replica.wait_idle()
        await replica.stop()
        replica.state = "stopped"
        self.replicas.pop(replica.index, None)
        self._notify()
        self._flush_pending()  # nothing may wait on a replica that will not come

    async def wait_serving(self, replica: int | None = None) -> None:
        """Until no replica (or replica number ``replica``) is starting, restarting,
        refitting or draining."""

        def unsettled() -> bool:
            watched = [self.replicas[replica]] if replica in self.replicas else []
            if replica is None:
                watched = list(self.replicas.values())
            return any(r.state not in ("serving", "failed") for r in watched)

        while unsettled():
            if self.stopped:
                return
            waiter: asyncio.Future[None] = self.runtime.loop.create_future()
            self._settled.append(waiter)
            await waiter

    def _notify(self) -> None:
        waiters, self._settled = self._settled, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def stats(self) -> list[ReplicaStats]:
        """Every replica's figures, by number."""
        return [self.replicas[i].stats() for i in sorted(self.replicas)]

    def report(self) -> dict[str, Any]:
        """The service and its replicas as ``actormesh top`` shows them (JSON-ready)."""
        return {
            "name": self.name,
            "class": self.actor_class.__qualname__,
            "per_replica": dict(self.settings.per_replica),
            "version": self.version,
            "paused": self.paused,
            "pending": len(self.pending),
            "sessions": len(self.sessions),
            "replicas": [
                {**dataclasses.asdict(stats), "mesh": f"{self.name}.{stats.replica}"}
                for stats in self.stats()
            ],
        }

    def open_session(self) -> int:
        """A new session id (bound to a replica by its first call)."""
        self._next_session += 1
        return self._next_session

    def close_session(self, session: int) -> None:
        """Forget a session's replica."""
        self.sessions.pop(session, None)

    async def stop(self) -> None:
        """Stop every replica; calls not yet answered fail."""
        self.stopped = True
        for call in self.pending:
            call.future._set_exception(self._stopped_error())
        self.pending.clear()
        replicas = list(self.replicas.values())
        for replica in replicas:
            for call in [*replica.queue, *replica.drop_in_flight()]:
                call.future._set_exception(self._stopped_error())
            replica.queue.clear()
            replica.state = "stopped"
        await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        self._notify()
        # Rebuilds under way are not cancelled (a cancelled one would leave the processes
        # it had started): each sees the service stopped when it is done and kills them.
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        task = self.runtime.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _enqueue(queue: deque[ServiceCall], call: ServiceCall) -> None:
    """Put ``call`` in ``queue`` in arrival order: a call moved or resent from a failed
    replica goes before the newer calls already waiting, not behind them."""
    if not queue or queue[-1].seq < call.seq:
        queue.append(call)
        return
    position = next(i for i, waiting in enumerate(queue) if waiting.seq > call.seq)
    queue.insert(position, call)
