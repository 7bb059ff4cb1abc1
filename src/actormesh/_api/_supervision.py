"""Supervision: every failure of a mesh reaches its owner once, never silence.

The owner of a mesh is whoever spawned it: the controller, or an actor (an actor may start
process meshes and spawn in them). Failures that no pending call is waiting for become a
``Failure`` for that owner:

- a worker process died (crash, kill, missed heartbeats): one failure per mesh it hosted,
  reported by the runtime that started the process (that is, in the owner's process);
- an endpoint called with ``broadcast`` raised: reported to the process that broadcast;
- an actor that owns meshes did not handle one of their failures (below);
- an actor's ``__init__`` raised (below).

An owning actor may define ``__supervise__(self, failure) -> bool``. It runs like a
message to that actor (on its thread for a ``def``, on its loop for an ``async def``, in
order with its other messages). Returning True handles the failure. Returning anything
else, raising, or not defining the hook escalates: the failure goes to the owner of the
*owning actor's* mesh, one level up, and so on until it reaches the controller.

In the controller, a failure goes to the hook set with ``set_failure_hook``. Without one,
it is written to stderr at once and recorded with the mesh, and calls raise
``SupervisionError`` carrying it, by this rule (the same every time: the owner's runtime
records a death before any waiting call hears of it, so no race decides the outcome):

- a call whose actors include a rank that *died* unhandled raises, every time; a call,
  slice or ``choose`` that leaves the dead ranks out works as before. An actor whose
  endpoint raised with nobody to answer (a ``broadcast``), or that did not handle a
  failure of a mesh it owns, counts as dead: its worker dropped it (after running its
  ``__cleanup__`` with the error), as Monarch does.

A controller never learns of a failure only by noticing that something is missing. With
a hook, the hook decides; calls that include a dead rank then fail with
``ActorDiedError``.

A failing ``__init__`` is a failure too (kind "init"): reported like the others, and
raised as ``ActorInitError`` by ``mesh.initialized`` (and awaiting the mesh), since the
caller of ``spawn`` got the mesh before any ``__init__`` ran. Calls that include such a
rank raise its ``ActorInitError`` rather than ``SupervisionError``, hook or not. An
owning actor's ``__supervise__`` hears of it, but one that does not handle it is not
dropped and nothing goes up: it is the spawner, and the spawn raised the error to it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from .._core import error_from_payload, error_payload
from .._exceptions import ActorDiedError, ActorFailedError, SupervisionError
from .._hosts import ChildProcess, Runtime
from ._actor import point_of
from ._context import current_actor, qualified_name
from ._mesh_state import Failure, MeshState, all_states

__all__ = [
    "Failure",
    "actor_name",
    "adopt",
    "claim",
    "install",
    "release",
    "report",
    "set_failure_hook",
    "unhandled_fault_hook",
]

log = logging.getLogger("actormesh.supervision")

_HOOK = "__supervise__"

_hook: Callable[[Failure], None] | None = None
_installed: set[int] = set()
# Socket paths whose deaths their owner handles itself (a service rebuilding a replica as
# a unit): the ranks there are still recorded dead, but the handler hears of it instead
# of the mesh's owner, as a restart within its budget does not bother the owner. An
# ``__init__`` that raises there is left to the claimant too (its spawn raises it).
_CLAIMED: dict[str, Callable[[ChildProcess, str], None]] = {}


def claim(path: str, handler: Callable[[ChildProcess, str], None]) -> None:
    """Let ``handler(child, reason)`` (loop thread) take the death of the process at
    ``path`` instead of the owners of the meshes it hosts."""
    _CLAIMED[path] = handler


def release(path: str) -> None:
    """Undo `claim` (the process is being stopped or was replaced)."""
    _CLAIMED.pop(path, None)


def set_failure_hook(hook: Callable[[Failure], None] | None) -> None:
    """Handle the failures that reach the controller with ``hook`` (``None``: the default).

    The hook runs on actormesh's event-loop thread: keep it short and never block in it
    (record the failure, set an event, schedule work elsewhere).
    """
    global _hook
    _hook = hook


def install(runtime: Runtime) -> None:
    """Route the runtime's failure reports here (idempotent)."""
    if id(runtime) in _installed:
        return
    _installed.add(id(runtime))
    runtime.failure_handler = _on_failure_frame
    runtime.children.exit_listeners.append(_on_process_exit)


def adopt(state: MeshState) -> None:
    """Make the calling actor, if any, the owner of a mesh it is spawning."""
    identity = current_actor()
    if identity is not None and identity.mesh is not None:
        state.owner = (identity.mesh._ref.mesh_id, identity.point.rank)


def report(state: MeshState, failure: Failure) -> None:
    """Hand ``failure`` of ``state``'s mesh to its owner (loop thread)."""
    if failure.kind == "init" and all(state.paths[r] in _CLAIMED for r in failure.ranks):
        # Processes whose deaths someone claimed: that someone spawned there and gets the
        # ActorInitError from the spawn itself (a service rebuilding a replica retries).
        log.info("init failure of mesh '%s' left to its claimant", failure.mesh)
        return
    owner = state.owner
    runtime = Runtime.current()
    if runtime is not None:
        runtime.record_event(
            "supervision",
            mesh=failure.mesh,
            rank=failure.ranks[0] if len(failure.ranks) == 1 else None,
            message=str(failure.error),
            failure=failure.kind,
            ranks=list(failure.ranks),
            actor=failure.actor,
            cause=failure.cause,
        )
    if owner is not None and runtime is not None:
        if runtime.hosting.deliver_local(*owner, _Supervise(runtime, owner, failure)):
            return
        # The owning actor is gone (its mesh stopped): its own owner hears of it.
        if _escalate(runtime, owner, failure, None):
            return
    _to_controller(state, failure)


# The failures a program's hook is running for, each with whether it passed the failure
# on to the default hook (loop thread; a list, since a hook may fail in turn).
_in_hook: list[list[Any]] = []


def _to_controller(state: MeshState | None, failure: Failure) -> None:
    hook = _hook if _hook is not None else _monarch_hook()
    if hook is not None:
        running = [failure, False]
        _in_hook.append(running)
        try:
            hook(failure)
            handled = True
        except BaseException:
            log.exception("the failure hook raised; the failure stays unhandled")
            handled = False
        finally:
            _in_hook.remove(running)
        defaulted = running[1]
        if handled and not defaulted:
            return
        if not defaulted:
            _write_report(failure)
    else:
        _write_report(failure)
    if state is not None:
        state.unhandled.append(failure)


def _write_report(failure: Failure) -> None:
    print(
        f"actormesh: unhandled failure of mesh '{failure.mesh}' (ranks {list(failure.ranks)},"
        f" {failure.kind}): {failure.error}",
        file=sys.stderr,
        flush=True,
    )


def unhandled_fault_hook(failure: Failure) -> None:
    """What a failure nobody handled does in the controller, as Monarch's programs
    override it: ``actormesh.actor.unhandled_fault_hook = fn``.

    This default is actormesh's own behaviour, not Monarch's (which exits the program):
    the failure is written to stderr and calls that include the failed ranks raise
    ``SupervisionError`` (see the module docstring). A replacement that returns handles
    the failure; one that raises leaves it unhandled. A replacement may call this
    default (to log a failure, say, and leave it to the default): the failure is then
    written once and stays unhandled, as without a replacement. Called outside a hook,
    it writes the report.
    """
    for running in _in_hook:
        if running[0] is failure:
            running[1] = True
    _write_report(failure)


def _monarch_hook() -> Callable[[Failure], None] | None:
    # A program written for Monarch sets the hook as a module attribute, at any time.
    face = sys.modules.get("actormesh.actor")
    hook = getattr(face, "unhandled_fault_hook", None) if face is not None else None
    return None if hook is None or hook is unhandled_fault_hook else hook


def _escalate(
    runtime: Runtime, owner: tuple[str, int], failure: Failure, why: BaseException | None
) -> bool:
    """Send ``failure`` up: to whoever spawned the owning actor's mesh."""
    mesh_id, rank = owner
    detail = f" (__supervise__ raised {type(why).__name__}: {why})" if why is not None else ""
    error = SupervisionError(
        f"actor rank {rank} of mesh '{mesh_id.rsplit('-', 1)[0]}' did not handle a failure of "
        f"mesh '{failure.mesh}' it owns{detail}: ranks {list(failure.ranks)}, "
        f"{failure.kind}: {failure.error}",
        failure,
    )
    payload = error_payload(error, mesh=mesh_id.rsplit("-", 1)[0], point={}, endpoint=_HOOK)
    return runtime.hosting.escalate(mesh_id, rank, _HOOK, payload)


class _Supervise:
    """The message that runs an owning actor's ``__supervise__`` (a mailbox ``Message``):
    urgent, so it does not wait behind the actor's queued messages (Monarch's order)."""

    endpoint = _HOOK
    urgent = True

    def __init__(self, runtime: Runtime, owner: tuple[str, int], failure: Failure) -> None:
        self.runtime = runtime
        self.owner = owner
        self.failure = failure
        self.cancelled = False

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.failure,), {}

    def succeed(self, value: Any) -> None:
        if value is True:
            log.info("failure of mesh '%s' handled by its owner", self.failure.mesh)
            return
        self._up(None)

    def fail(self, error: BaseException) -> None:
        self._up(None if isinstance(error, AttributeError) else error)

    def fail_init(self, error: BaseException) -> None:
        self.fail(error)

    def abandon(self, error: BaseException, as_sent: bool = False) -> None:
        self.fail(error)

    def _up(self, why: BaseException | None) -> None:
        if self.failure.kind == "init":
            # The owner spawned that mesh, and the spawn raised the error to it (awaiting
            # the mesh, and every call that includes those ranks): a failure it did not
            # handle here neither goes up nor makes the owner fail with it.
            log.info("failure of mesh '%s' left to its spawner: %s", self.failure.mesh, why)
            return
        # Any thread (the actor's, for a def hook): escalation sends from the loop.
        self.runtime.call_soon(self._escalate, why)

    def _escalate(self, why: BaseException | None) -> None:
        if not _escalate(self.runtime, self.owner, self.failure, why):
            _to_controller(None, self.failure)
        # As in Monarch, an owner that does not handle a failure of a mesh it owns fails
        # with it: the actor is dropped, and its own owner heard of it just now.
        mesh_id, rank = self.owner
        error = SupervisionError(
            f"did not handle a failure of mesh '{self.failure.mesh}' it owns", self.failure
        )
        self.runtime.hosting.drop_actor(mesh_id, rank, error)


def _on_failure_frame(mesh_id: str, rank: int, endpoint: str, payload: memoryview) -> None:
    error = error_from_payload(payload)
    kind = "unhandled" if endpoint == _HOOK else "broadcast"
    if kind == "broadcast" and isinstance(error, ActorFailedError):
        kind = "ended"  # whatever the call was, the endpoint ended its actor
    state = next((s for s in all_states() if s.mesh_id == mesh_id), None)
    if state is None:
        print(f"actormesh: {kind} failure of endpoint '{endpoint}': {error}", file=sys.stderr)
        return
    # The worker dropped the actor (see _core._hosting): it is gone for good.
    state.dead.setdefault(rank, f"dropped after a failure ({kind} of '{endpoint}')")
    actor, cause = actor_name(state, rank), f"actor explicitly aborted due to: {error}"
    origin = getattr(getattr(error, "cause", None), "failure", None)
    if kind == "unhandled" and isinstance(origin, Failure) and origin.actor:
        # An owner passed up a failure of a mesh of its own: the report names the actor
        # that failed first, deepest in the tree, and why (as Monarch's does).
        actor, cause = origin.actor, origin.cause or cause
    report(state, Failure(state.name, (rank,), kind, error, actor, cause))


def _on_process_exit(child: ChildProcess, reason: str) -> None:
    runtime = Runtime.current()
    if runtime is not None and runtime.children.relaunching(child.listen_path):
        return  # the restart policy handles it; the owner hears only if it fails
    claimant = _CLAIMED.pop(child.listen_path, None)
    for state in all_states():
        if state.stopped:
            continue
        ranks = tuple(r for r, path in enumerate(state.paths) if path == child.listen_path)
        if not ranks:
            continue
        for rank in ranks:
            state.dead.setdefault(rank, reason)
        # Ranks whose __init__ failed held no actor: their owner heard of them already.
        ranks = tuple(rank for rank in ranks if rank not in state.init_errors)
        if claimant is not None or not ranks:
            continue
        error = ActorDiedError(
            f"the process of actor(s) {list(ranks)} of mesh '{state.name}' died: {reason}",
            reason=reason,
            ranks=ranks,
        )
        code = child.returncode
        if code is not None and code < 0:
            cause = f"the process this actor was running on failed: Killed(sig={-code})"
        elif code:
            cause = f"the process this actor was running on exited with non-zero code {code}"
        else:
            cause = f"the process this actor was running on failed: {reason}"
        report(state, Failure(state.name, ranks, "died", error, actor_name(state, ranks[0]), cause))
    if claimant is not None:
        claimant(child, reason)


def actor_name(state: MeshState, rank: int) -> str:
    """The qualified name of actor ``rank`` of ``state``'s mesh, as Monarch's reports
    write it (``<root>.<train.Trainer trainer{'gpus': 0/2}>``); empty when unknown."""
    ref = state.ref
    if ref is None:
        return ""
    point = point_of(ref, rank)
    own = f"<{ref.class_name} {state.name}{point if len(point) else ''}>"
    return own if state.creator is None else f"{qualified_name(state.creator)}.{own}"
