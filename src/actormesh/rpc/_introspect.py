"""What a worker can tell about itself: torch's debug counters and agent handle.

torch spreads these over private functions that programs and tests use, so they keep
torch's names and keys (values are ints where torch gives strings; ``int()`` reads
both)::

    _rref_context_get_debug_info()  num_owner_rrefs, num_forks, num_pending_users,
                                    num_pending_futures (+ num_user_rrefs,
                                    num_pending_children)
    autograd._get_debug_info()      num_autograd_contexts, num_current_backward_passes
    _get_current_rpc_agent()        .get_worker_info(name), .get_worker_infos(),
                                    .get_debug_info() (agent.* keys)
    _get_debug_info()               all of the above in one dict
"""

from __future__ import annotations

from ._dist_autograd import engine
from ._rref_table import forks, owners
from ._state import RpcState, current, current_or_none
from ._worker_info import WorkerInfo

__all__ = [
    "_get_current_rpc_agent",
    "_get_debug_info",
    "_is_current_rpc_agent_set",
    "_rref_context_get_debug_info",
    "autograd_debug_info",
]


def _rref_context_get_debug_info() -> dict[str, int]:
    """This worker's RRef bookkeeping, under torch's keys.

    ``num_owner_rrefs``: values owned here that some other worker references;
    ``num_forks``: the references to them (forks) this owner knows of;
    ``num_pending_futures``: values announced to this owner and not yet created;
    ``num_user_rrefs``: user RRefs held here; ``num_pending_users``: those whose owner
    has not confirmed them yet; ``num_pending_children``: RRefs sent on whose receiver
    has not yet registered with the owner.
    """
    state = current()
    owned = owners(state)
    users = forks(state)
    with owned._lock, users._lock:
        return {
            "num_owner_rrefs": len(owned.entries),
            "num_pending_futures": sum(1 for e in owned.entries.values() if not e.created),
            "num_forks": sum(len(e.forks) for e in owned.entries.values()),
            "num_user_rrefs": len(users.forks),
            "num_pending_users": sum(1 for f in users.forks.values() if not f.confirmed),
            "num_pending_children": sum(len(f.pending) for f in users.forks.values()),
        }


def autograd_debug_info(state: RpcState) -> dict[str, int]:
    """The counters of ``actormesh.rpc.autograd._get_debug_info()``."""
    eng = engine(state)
    return {
        "num_autograd_contexts": len(eng.contexts),
        "num_current_backward_passes": eng.passes,
    }


class _Agent:
    """The handle ``_get_current_rpc_agent()`` gives: the group as this worker sees it."""

    __slots__ = ("_state",)

    def __init__(self, state: RpcState) -> None:
        self._state = state

    def get_worker_info(self, worker_name: str | None = None) -> WorkerInfo:
        """This worker's ``WorkerInfo``, or that of the worker named ``worker_name``."""
        if worker_name is None:
            return self._state.me
        return self._state.worker(worker_name)

    def get_worker_infos(self) -> list[WorkerInfo]:
        """Every worker of the group, by rank."""
        return list(self._state.workers)

    def get_debug_info(self) -> dict[str, int]:
        """The agent's counters (``agent.*`` keys)."""
        state = self._state
        return {
            "agent.num_pending_requests": state.inflight,
            "agent.thread_pool_size": state.pool.size,
            "agent.num_gone_workers": len(state.gone),
        }

    def __repr__(self) -> str:
        return f"<actormesh RPC agent of {self._state.me}>"


def _get_current_rpc_agent() -> _Agent:
    """This worker's agent handle (as torch's, for ``get_worker_infos()`` and debug info).

    Raises:
        RpcNotInitialized: ``init_rpc`` has not been called (or ``shutdown`` has).
    """
    return _Agent(current())


def _is_current_rpc_agent_set() -> bool:
    """True while this process is in an RPC group."""
    return current_or_none() is not None


def _get_debug_info() -> dict[str, int]:
    """Every counter of this worker: RRefs, the agent and distributed autograd."""
    state = current()
    info = _rref_context_get_debug_info()
    info.update(_Agent(state).get_debug_info())
    info.update(autograd_debug_info(state))
    return info
