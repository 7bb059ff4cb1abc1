"""Restarts: bringing a dead rank back, with its coordinates, its actors and its address.

A process mesh started with ``restart="rank"`` replaces a worker that dies (crash, kill,
missed heartbeats) by a new process at the same rank, listening on the same socket path,
so every mesh reference (including copies held by other actors) stays valid. Every actor
mesh that was alive in the process is rebuilt there: ``__init__`` runs again with the
arguments of the original spawn, then the actor's optional ``__restore__()``.

What happens to calls:

- calls in flight when the process died fail with ``ActorDiedError`` (the endpoint may
  have run, partly or wholly: it is not silently run twice), except calls to endpoints
  marked ``@endpoint(idempotent=True)``, which are sent again to the new process;
- calls made while the restart is under way wait for it and go out, in order, once the
  actors are rebuilt (or fail with the restart's error if it does not succeed).

Each rank may restart ``max_restarts`` times within any ``restart_window`` seconds. A death
beyond that budget, or a restart that fails (the new process does not start, an
``__init__`` raises), is an ordinary death: the rank stays dead and the mesh's owner hears
of it (``Failure`` of kind "died" or "restart_failed"). Restarts within the budget are
logged on ``actormesh.restart``; the owner is not bothered with them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._core import dumps, headers
from .._exceptions import ActorDiedError
from .._hosts import ChildProcess, Runtime
from ._future import Future
from ._mesh_state import Failure, all_states
from ._requests import _Request
from ._supervision import report

if TYPE_CHECKING:
    from ._actor import SpawnSpec
    from ._actor_mesh import ActorMesh
    from ._proc_mesh import _Processes

__all__ = ["RestartMode", "RestartPolicy", "Restarter", "install", "uninstall"]

log = logging.getLogger("actormesh.restart")

RestartMode = Literal["never", "rank"]


@dataclass(frozen=True)
class RestartPolicy:
    """What to do when a process of a process mesh dies.

    Attributes:
        mode: ``"never"`` (the rank stays dead) or ``"rank"`` (a new process takes its
            place, see the module docstring).
        max_restarts: restarts allowed per rank within ``window`` seconds.
        window: the sliding window, in seconds, that ``max_restarts`` counts in.
    """

    mode: RestartMode = "never"
    max_restarts: int = 3
    window: float = 60.0

    def __post_init__(self) -> None:
        if self.mode not in ("never", "rank"):
            raise ValueError(f"restart must be 'never' or 'rank', not {self.mode!r}")
        if self.max_restarts < 0 or self.window <= 0:
            raise ValueError("max_restarts must be >= 0 and restart_window positive")


class Restarter:
    """Restarts the ranks of one process mesh (every method runs on the loop thread)."""

    def __init__(self, runtime: Runtime, processes: _Processes, policy: RestartPolicy) -> None:
        self.runtime = runtime
        self.processes = processes
        self.policy = policy
        self._history: dict[int, deque[float]] = {}
        # mesh id -> (the mesh, its spawn), to rebuild its actors in a new process
        self.spawned: dict[str, tuple[ActorMesh[Any], SpawnSpec]] = {}

    def decide(self, child: ChildProcess) -> bool:
        """Called when ``child`` died: True (and a restart is started) if within budget."""
        # A replacement that dies before joining is not in the list yet: the restart
        # under way reports that failure itself.
        if self.processes.stopped or child not in self.processes.children:
            return False
        now = time.monotonic()
        history = self._history.setdefault(child.rank, deque())
        while history and now - history[0] > self.policy.window:
            history.popleft()
        limit, window = self.policy.max_restarts, self.policy.window
        if len(history) >= limit:
            child.restart_note = (
                f"not restarted: the rank's restart budget is spent ({len(history)} restarts "
                f"within {window:g} s, max_restarts={limit})"
            )
            return False
        history.append(now)
        child.restart_note = (
            f"restarting the rank ({len(history)} of at most {limit} in {window:g} s)"
        )
        self.runtime.loop.create_task(self._restart(child))
        return True

    async def _restart(self, child: ChildProcess) -> None:
        path = child.listen_path
        log.warning("restarting rank %s of process mesh '%s'", child.rank, self.processes.name)
        try:
            new = await self.runtime.children.relaunch(child)
        except Exception as error:
            self._failed(child, f"its new process did not start: {error}")
            self.runtime.children.end_relaunch(path, error)
            return
        if self.processes.stopped:  # stopped while we were restarting
            await self.runtime.stop_processes([new], grace=0.0)
            self.runtime.children.end_relaunch(path, ActorDiedError("the process mesh was stopped"))
            return
        self.processes.children[self.processes.children.index(child)] = new
        self.runtime.record_event(
            "restart",
            mesh=self.processes.name,
            rank=child.rank,
            pid=new.pid,
            address=path,
            message=child.restart_note,
            old_pid=child.pid,
        )
        problems = await self._rebuild(path)
        if problems:
            self._failed(child, "; ".join(problems))
        self.runtime.children.end_relaunch(path, None)

    def remember(self, mesh: ActorMesh[Any], spec: SpawnSpec) -> None:
        """Keep ``mesh``'s spawn to rebuild it after restarts (and forget stopped ones)."""
        for mesh_id, (known, _) in list(self.spawned.items()):
            if known._state.stopped:
                del self.spawned[mesh_id]
        self.spawned[mesh._ref.mesh_id] = (mesh, spec)

    async def _rebuild(self, path: str) -> list[str]:
        """Spawn every live actor mesh again at the ranks hosted by ``path``."""
        problems = []
        for mesh, spec in list(self.spawned.values()):
            state = mesh._state
            if state.stopped:
                continue
            # A rank whose __init__ raised is gone for good (it was a failure of its own,
            # reported then): a restart of its process does not build it again.
            ranks = tuple(
                rank
                for rank, at in enumerate(mesh._ref.paths)
                if at == path and rank not in state.init_errors
            )
            if not ranks:
                continue
            request = _Respawn(mesh, ranks)
            payload, buffers = dumps(dataclasses.replace(spec, restore=True))
            request.send([(path, ranks, [payload, *buffers])], hold=False)
            try:
                await request.future
            except Exception as error:
                problems.append(f"mesh '{mesh.name}': {error}")
                continue
            for rank in ranks:
                state.dead.pop(rank, None)
        return problems

    def _failed(self, child: ChildProcess, why: str) -> None:
        reason = f"rank {child.rank} could not be restarted: {why}"
        log.error("process mesh '%s': %s", self.processes.name, reason)
        self.runtime.record_event(
            "restart_failed", mesh=self.processes.name, rank=child.rank, message=reason
        )
        for state in all_states():
            if state.stopped or state.mesh_id not in self.spawned:
                continue
            ranks = tuple(r for r, at in enumerate(state.paths) if at == child.listen_path)
            for rank in ranks:
                state.dead[rank] = reason
            if ranks:
                error = ActorDiedError(reason, reason=reason, ranks=ranks)
                report(state, Failure(state.name, ranks, "restart_failed", error))


class _Respawn(_Request):
    """Rebuilds the actors of one mesh at some ranks of a restarted process."""

    def __init__(self, mesh: ActorMesh[Any], ranks: tuple[int, ...]) -> None:
        super().__init__(mesh, "__init__", ranks)
        self.future: Future[None] = self.new_future()
        self.errors: list[BaseException] = []

    routed = False  # answers come back on the runtime's connection, which watches them

    def _header(self, ranks: tuple[int, ...], token: str | None = None) -> headers.Header:
        return headers.Spawn(self.req_id, self.ref.mesh_id, ranks)

    def _value(self, rank: int, value: Any) -> None:
        pass

    def _error(self, rank: int, error: BaseException) -> None:
        self.errors.append(error)

    def _give_up(self, error: BaseException) -> None:
        self.future._set_exception(error)

    def _complete(self) -> None:
        if self.errors:
            self.future._set_exception(self.errors[0])
        else:
            self.future._set_result(None)


_RESTARTERS: dict[str, Restarter] = {}  # socket path -> the restarter of its process mesh


def install(runtime: Runtime, restarter: Restarter) -> None:
    """Let ``restarter`` decide for its processes when they die (loop thread or any)."""
    for child in restarter.processes.children:
        _RESTARTERS[child.listen_path] = restarter
    runtime.children.relaunch_policy = _decide


def _decide(child: ChildProcess) -> bool:
    restarter = _RESTARTERS.get(child.listen_path)
    return restarter is not None and restarter.decide(child)


def uninstall(restarter: Restarter) -> None:
    """Forget ``restarter`` (its process mesh is being stopped)."""
    for path, known in list(_RESTARTERS.items()):
        if known is restarter:
            del _RESTARTERS[path]
