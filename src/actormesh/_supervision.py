"""Supervision: every failure of a mesh reaches its owner, never silence.

The runtime reports two kinds of failure that no pending call is waiting for: a
``broadcast`` whose endpoint raised, and a worker process that died. Each becomes a
``Failure`` handed to the failure hook (``set_failure_hook``). With no hook, the failure is
written to the controller's stderr at once and the next use of that mesh raises
``SupervisionError``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ._core import ChildProcess, Runtime
from ._core._envelope import error_from_payload
from ._exceptions import ActorDiedError
from ._mesh_state import Failure, MeshState, all_states

__all__ = ["Failure", "install", "set_failure_hook"]

_hook: Callable[[Failure], None] | None = None
_installed: set[int] = set()


def set_failure_hook(hook: Callable[[Failure], None] | None) -> None:
    """Handle unhandled mesh failures with ``hook`` (``None`` restores the default)."""
    global _hook
    _hook = hook


def install(runtime: Runtime) -> None:
    """Route the runtime's failure reports here (idempotent)."""
    if id(runtime) in _installed:
        return
    _installed.add(id(runtime))
    runtime.failure_handler = _on_broadcast_failure
    runtime.exit_listeners.append(_on_process_exit)


def report(state: MeshState, failure: Failure) -> None:
    """Hand ``failure`` of ``state``'s mesh to the hook, or record it for the owner."""
    if _hook is not None:
        _hook(failure)
        return
    print(
        f"actormesh: unhandled failure of mesh '{failure.mesh}' (ranks {list(failure.ranks)},"
        f" {failure.kind}): {failure.error}",
        file=sys.stderr,
        flush=True,
    )
    state.unhandled.append(failure)


def _on_broadcast_failure(mesh_id: str, rank: int, endpoint: str, payload: memoryview) -> None:
    error = error_from_payload(payload)
    state = next((s for s in all_states() if s.mesh_id == mesh_id), None)
    if state is None:
        print(f"actormesh: broadcast to '{endpoint}' failed: {error}", file=sys.stderr)
        return
    report(state, Failure(state.name, (rank,), "broadcast", error))


def _on_process_exit(child: ChildProcess, reason: str) -> None:
    for state in all_states():
        if state.stopped:
            continue
        ranks = tuple(r for r, path in enumerate(state.paths) if path == child.listen_path)
        if not ranks:
            continue
        for rank in ranks:
            state.dead.setdefault(rank, reason)
        error = ActorDiedError(
            f"process of mesh '{state.name}' {reason}", reason=reason, ranks=ranks
        )
        report(state, Failure(state.name, ranks, "died", error))
