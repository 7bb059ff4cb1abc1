"""One replica of a service: a process mesh of its own, built, killed and counted as a unit.

A replica owns its processes (started with ``proc_mesh``, never restarted one by one): a
tensor-parallel group whose rank died is broken as a whole (its collectives hang or
fail), so the service kills what is left of it and builds it again from nothing. The
deaths of its processes are claimed (`_supervision.claim`), so they reach the service,
not the controller's failure hook. Every method runs on the runtime's loop thread.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from .._hosts import ChildProcess, Runtime
from . import _supervision
from ._mesh_state import all_states
from ._proc_mesh import ProcMesh, proc_mesh
from ._service_call import ServiceCall, ServiceSettings
from ._service_values import ReplicaState, ReplicaStats
from ._system import ActorHost, run_in_actors

__all__ = ["Replica", "settle"]


async def settle(result: Any) -> Any:
    """The value of a user hook's result: awaited when it is awaitable (a coroutine, an
    actormesh ``Future``), as it is otherwise."""
    if inspect.isawaitable(result):
        return await result
    return result


def _alive(host: ActorHost) -> None:
    """Runs in every actor of a replica: answering at all is the point."""


class Replica:
    """A sub-mesh of a service (see the module docstring).

    Attributes:
        index: its number, unique for the service's life (a rebuilt replica keeps it).
        state: see `ReplicaState`.
        procs: its processes, while it has them.
        actors: its actor mesh (one actor per process), while it has one.
        version: the weight version its actors hold.
        queue: calls routed here, waiting for a slot (``max_in_flight``).
        in_flight: calls sent to its actors and not yet answered.
    """

    def __init__(self, index: int, settings: ServiceSettings) -> None:
        self.index = index
        self.settings = settings
        self.state: ReplicaState = "starting"
        self.procs: ProcMesh | None = None
        self.actors: Any = None
        self.version: int | None = None
        self.queue: deque[ServiceCall] = deque()
        self.in_flight: set[ServiceCall] = set()
        self.completed = 0
        self.failed = 0
        self.restarts = 0
        self._answered: deque[float] = deque()  # monotonic times of recent answers
        self._history: deque[float] = deque()  # monotonic times of restarts (budget)
        self._idle: list[asyncio.Future[None]] = []

    # -- load and figures ---------------------------------------------------------------

    @property
    def load(self) -> int:
        """Calls routed here and not answered: what least-loaded routing compares."""
        return len(self.queue) + len(self.in_flight)

    def ended(self, call: ServiceCall, ok: bool) -> None:
        """``call`` left the in-flight set, answered (``ok``) or not."""
        self.in_flight.discard(call)
        if ok:
            self.completed += 1
            now = time.monotonic()
            self._answered.append(now)
            self._forget_old(now)
        else:
            self.failed += 1
        if not self.in_flight:
            self._wake_idle()

    def _forget_old(self, now: float) -> None:
        window = self.settings.rate_window
        while self._answered and now - self._answered[0] > window:
            self._answered.popleft()

    def stats(self) -> ReplicaStats:
        """Its figures now."""
        now = time.monotonic()
        self._forget_old(now)
        children = self.procs._processes.children if self.procs is not None else []
        return ReplicaStats(
            replica=self.index,
            state=self.state,
            queued=len(self.queue),
            in_flight=len(self.in_flight),
            completed=self.completed,
            failed=self.failed,
            requests_per_s=len(self._answered) / self.settings.rate_window,
            restarts=self.restarts,
            version=self.version,
            pids=tuple(child.pid for child in children),
        )

    async def wait_idle(self) -> None:
        """Until nothing is in flight here (calls already queued are not waited for)."""
        if not self.in_flight:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle.append(waiter)
        await waiter

    def _wake_idle(self) -> None:
        waiters, self._idle = self._idle, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def drop_in_flight(self) -> list[ServiceCall]:
        """Take every call in flight away (the replica failed under them)."""
        calls = list(self.in_flight)
        self.in_flight.clear()
        self.failed += len(calls)
        self._wake_idle()
        return calls

    # -- restarts ---------------------------------------------------------------------

    def may_restart(self) -> bool:
        """Count a restart if the budget allows one now (``max_restarts`` per window)."""
        now = time.monotonic()
        window = self.settings.restart_window
        while self._history and now - self._history[0] > window:
            self._history.popleft()
        if len(self._history) >= self.settings.max_restarts:
            return False
        self._history.append(now)
        self.restarts += 1
        return True

    def budget_note(self) -> str:
        """Why a restart was refused, in words."""
        limit, window = self.settings.max_restarts, self.settings.restart_window
        return f"its restart budget is spent ({limit} restarts within {window:g} s)"

    # -- processes ----------------------------------------------------------------------

    async def build(
        self,
        name: str,
        actor_class: type,
        on_death: Callable[[Replica, str], None],
        current_version: Callable[[], int],
    ) -> None:
        """Start the processes, spawn the actors, run the setup hooks, then load weights
        until the replica holds the service's current version (a refit may move it on
        while this one loads)."""
        settings = self.settings
        procs: ProcMesh = await proc_mesh(
            dict(settings.per_replica), name=f"{name}.{self.index}", env=settings.env
        )
        self.procs = procs
        for child in procs._processes.children:
            _supervision.claim(child.listen_path, self._death_handler(on_death))
        actors: Any = procs.spawn(name, actor_class, *settings.args, **settings.kwargs)
        await actors.initialized
        self.actors = actors
        for setup in settings.setup:
            await settle(setup(actors))
        while self.version != current_version():
            version = current_version()
            if settings.load_weights is not None:
                await settle(settings.load_weights(actors, version))
            self.version = version

    def _death_handler(self, on_death: Callable[[Replica, str], None]) -> Any:
        procs = self.procs

        def died(child: ChildProcess, reason: str) -> None:
            if self.procs is procs:  # not a process of an earlier build
                on_death(self, f"rank {child.rank} died: {reason}")

        return died

    async def probe(self) -> bool:
        """Whether every actor of the replica still answers."""
        if self.actors is None:
            return False
        try:
            await run_in_actors(self.actors, _alive)
        except Exception:
            return False
        return True

    async def kill(self, reason: str) -> None:
        """End the replica's processes at once, without running ``__cleanup__``: a
        broken group may never get there. Their deaths no longer reach the service."""
        procs, self.procs, self.actors = self.procs, None, None
        if procs is None:
            return
        processes = procs._processes
        for child in processes.children:
            _supervision.release(child.listen_path)
        if processes.stopped:
            return
        processes.stopped = True
        for state in all_states():
            if state.mesh_id in processes.meshes:
                state.note_stop(reason)
                state.stopped = True
        children = cast(list[ChildProcess], processes.children)  # (a replica owns them)
        for child in children:
            # Not SHUTDOWN first: a rank blocked in a collective with the dead one would
            # only answer SIGTERM once it gives up, and nothing of it is worth keeping.
            child.stopping = True  # its exit is expected: nobody is told of it
            child.signal_group(signal.SIGKILL)
        await processes.allocator.stop(Runtime.get(), children, 0.0)

    async def stop(self) -> None:
        """Stop the replica's processes the ordinary way (``__cleanup__`` runs)."""
        procs, self.procs, self.actors = self.procs, None, None
        if procs is None:
            return
        for child in procs._processes.children:
            _supervision.release(child.listen_path)
        await procs.stop("the service was stopped or scaled down")
