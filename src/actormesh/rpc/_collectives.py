"""torch's private RPC collectives, ``_all_gather``, ``_barrier`` and ``_wait_all_workers``.

Programs written for torch reach for these (``rpc.api._barrier(names)`` is the only RPC
barrier torch has), so they keep torch's names and semantics::

    _all_gather(obj, worker_names=None, timeout=-1)   {name: obj} of every named worker
    _barrier(worker_names)                            block until they all arrived
    _wait_all_workers(timeout=0)                      the graceful-shutdown barrier

``_all_gather`` runs as torch's does, over ordinary RPCs: the worker with the smallest
name leads; the others send it their object; once it has all of them it sends the whole
map to each. Calls over the same set of names are matched by their order on each worker
(the n-th call of one meets the n-th of the others).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable
from typing import Any

from ._api import rpc_async, rpc_sync
from ._errors import RpcTimeoutError
from ._options import DEFAULT_SHUTDOWN_TIMEOUT, UNSET_RPC_TIMEOUT
from ._shutdown import graceful_shutdown
from ._state import current

__all__ = ["_all_gather", "_barrier", "_wait_all_workers"]

log = logging.getLogger("actormesh.rpc")


class _Gathering:
    """One ``_all_gather`` as the leader and each follower see it."""

    __slots__ = ("objects", "ready")

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.ready = threading.Event()


_lock = threading.RLock()
_sequence: dict[str, int] = {}
_gatherings: collections.defaultdict[str, _Gathering] = collections.defaultdict(_Gathering)


def _gather_to_leader(sequence_id: str, worker_name: str, obj: Any, worker_names: set[str]) -> None:
    """On the leader: record ``worker_name``'s object; release the leader when all are in."""
    with _lock:
        gathering = _gatherings[sequence_id]
        if worker_name in gathering.objects:
            raise RuntimeError(f"{worker_name} joined _all_gather {sequence_id!r} twice")
        gathering.objects[worker_name] = obj
        if set(gathering.objects) == worker_names:
            gathering.ready.set()


def _broadcast_to_followers(sequence_id: str, objects: dict[str, Any]) -> None:
    """On a follower: the leader's map has arrived."""
    with _lock:
        gathering = _gatherings[sequence_id]
    gathering.objects = objects
    gathering.ready.set()


def _all_gather(
    obj: Any, worker_names: Iterable[str] | None = None, timeout: float = UNSET_RPC_TIMEOUT
) -> dict[str, Any]:
    """Gather ``obj`` from every worker in ``worker_names`` (default: all), on each of them.

    Args:
        obj: this worker's contribution.
        worker_names: the workers taking part (this one included).
        timeout: seconds for each RPC and for the wait; ``-1`` (the default) uses the
            RPC timeout for the RPCs and waits without limit, ``0`` means no limit.

    Raises:
        RpcTimeoutError: the leader's map did not reach a follower in time (on the
            leader), or an RPC to the leader ran out of time (on a follower).
    """
    state = current()
    names = set(worker_names) if worker_names else {w.name for w in state.workers}
    leader = min(names)
    me = state.me.name
    with _lock:
        key = "".join(sorted(names))
        number = _sequence.get(key, 0)
        _sequence[key] = number + 1
        sequence_id = f"{key}{number}"
    if timeout == UNSET_RPC_TIMEOUT:
        rpc_timeout, wait_timeout = state.rpc_timeout, None
    elif timeout == DEFAULT_SHUTDOWN_TIMEOUT:
        rpc_timeout, wait_timeout = timeout, None
    else:
        rpc_timeout = wait_timeout = timeout
    if me == leader:
        _gather_to_leader(sequence_id, me, obj, names)
    else:
        rpc_sync(leader, _gather_to_leader, args=(sequence_id, me, obj, names), timeout=rpc_timeout)
    with _lock:
        gathering = _gatherings[sequence_id]
    gathering.ready.wait(wait_timeout)
    if me == leader:
        futures = {
            name: rpc_async(
                name,
                _broadcast_to_followers,
                args=(sequence_id, gathering.objects),
                timeout=rpc_timeout,
            )
            for name in sorted(names - {leader})
        }
        errors = []
        for name, future in futures.items():
            try:
                future.wait()
            except RuntimeError as error:
                errors.append((name, error))
        if errors:
            with _lock:
                _gatherings.pop(sequence_id, None)
            raise RpcTimeoutError(
                f"Followers {[name for name, _ in errors]} timed out in _all_gather after "
                f"{rpc_timeout:.2f} seconds. The first exception is {errors[0][1]}"
            )
    with _lock:
        done = _gatherings.pop(sequence_id)
    return done.objects


def _barrier(worker_names: Iterable[str]) -> None:
    """Block until every worker in ``worker_names`` has called ``_barrier`` with them.

    As torch's, a failure (a timeout, a worker gone) is logged, not raised.
    """
    try:
        _all_gather(None, set(worker_names))
    except RuntimeError:
        log.exception("the RPC barrier failed")


def _wait_all_workers(timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
    """Wait until every worker reaches this call (or a graceful ``shutdown``) and no RPC
    is in flight anywhere: the barrier that a graceful ``shutdown`` begins with.

    Raises:
        WorkerDiedError: a worker died or left first.
        RpcTimeoutError: ``timeout`` seconds (0: no limit) passed first.
    """
    graceful_shutdown(current(), timeout or None)
