"""Leaving the group: noticing dead peers, the shutdown barrier, and the local teardown.

Watches: at ``init_rpc`` every worker sends each peer a ``watch`` request that the peer
answers only when it shuts down. An answer means the peer left in order; the loss of the
connection instead means it died. Either way the listeners of ``RpcState.peer_gone``
(RRef tables, autograd contexts, the barrier) clean up at once, so nothing waits for a
worker that is gone.

Graceful shutdown: every worker meets at a barrier kept by rank 0, then all repeat a
second barrier, each first waiting for its own outstanding requests, and report how many
messages they have sent and handled; when two consecutive rounds show the same totals
and nothing in flight, no message is left anywhere. A dead or departed peer fails every
round it has not reached, so shutdown raises a clear error instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from concurrent.futures import Future as ConcurrentFuture
from typing import TYPE_CHECKING, Any

from .._core import headers
from .._exceptions import ActorError
from ._agent import endpoint
from ._errors import RpcTimeoutError, WorkerDiedError
from ._state import set_current

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = ["Board", "graceful_shutdown", "start_watches", "teardown"]

# Rounds whose totals repeat this often count as settled even if sent != handled (a
# message to a worker that vanished is never handled).
_STABLE_ROUNDS = 5


# -- watches --------------------------------------------------------------------------------


@endpoint("watch", counted=False)
def _handle_watch(state: RpcState, src: int) -> Any:
    future = state.loop.create_future()
    if state.closed:
        future.set_result(None)  # already gone: say so at once
    else:
        state.watchers.append(future)
    return future


def start_watches(state: RpcState) -> None:
    """Watch every peer, so its death or departure is noticed at once."""
    for peer in state.workers:
        if peer.id == state.me.id:
            continue

        def done(ok: bool, value: Any, peer: int = peer.id) -> None:
            if state.closed:
                return
            if ok:
                state.peer_gone(peer, f"worker {state.workers[peer]} has shut down", died=False)
            else:
                reason = getattr(value, "reason", "") or str(value)
                state.peer_gone(peer, reason, died=True)

        call = state.request(
            peer.id,
            "watch",
            (state.me.id,),
            done,
            what=f"watching {peer}",
            timeout=None,
            counted=False,
        )
        state.watch_calls.append(call)


# -- the barrier (kept by rank 0) -------------------------------------------------------------


class _Round:
    __slots__ = ("arrived", "waiters")

    def __init__(self) -> None:
        self.arrived: dict[int, Any] = {}
        self.waiters: list[asyncio.Future[Any]] = []


class Board:
    """Rank 0's barrier rounds; every method runs on the loop thread."""

    def __init__(self, state: RpcState) -> None:
        self._state = state
        self._rounds: dict[str, _Round] = {}
        # Why a round failed: told to workers that arrive after this one has left.
        self.failure: WorkerDiedError | None = None
        state.peer_listeners.append(self._peer_gone)

    def arrive(self, src: int, key: str, value: Any) -> asyncio.Future[Any]:
        """Worker ``src`` reached round ``key``; the future gets every worker's value."""
        state = self._state
        entry = self._rounds.setdefault(key, _Round())
        entry.arrived[src] = value
        future: asyncio.Future[Any] = state.loop.create_future()
        entry.waiters.append(future)
        missing = [r for r in range(len(state.workers)) if r not in entry.arrived]
        for rank in missing:
            if rank in state.gone:
                self._fail(key, rank, state.gone[rank])
                return future
        if not missing:
            del self._rounds[key]
            for waiter in entry.waiters:
                if not waiter.done():
                    waiter.set_result(dict(entry.arrived))
        return future

    def _peer_gone(self, rank: int, reason: str, died: bool) -> None:
        for key, entry in list(self._rounds.items()):
            if rank not in entry.arrived:
                self._fail(key, rank, reason)

    def _fail(self, key: str, rank: int, reason: str) -> None:
        entry = self._rounds.pop(key, None)
        if entry is None:
            return
        worker = self._state.workers[rank]
        error = WorkerDiedError(
            f"RPC shutdown cannot complete: {worker} is gone before reaching shutdown ({reason})",
            reason=reason,
        )
        self.failure = error
        for waiter in entry.waiters:
            if not waiter.done():
                waiter.set_exception(error)


@endpoint("barrier", counted=False)
def _handle_barrier(state: RpcState, src: int, key: str, value: Any) -> Any:
    board: Board | None = state.tables.get("barrier")
    if state.closed or board is None:
        if board is not None and board.failure is not None:
            raise board.failure  # it left because a worker was gone: that one
        raise WorkerDiedError(
            f"RPC shutdown cannot complete: {state.me} keeps the shutdown barrier and has "
            "already left (shutdown(graceful=False)?)"
        )
    return board.arrive(src, key, value)


# The reason of the error a worker that leaves gives the requests it took and never
# answered (a barrier round, say).
_LEFT_UNANSWERED = "left the RPC group"

# Seconds between looks at whether rank 0 is gone while waiting at its barrier.
_LEADER_CHECK = 0.5


def _leader_left(state: RpcState, reason: str) -> WorkerDiedError:
    return WorkerDiedError(
        f"RPC shutdown cannot complete: {state.workers[0]} keeps the shutdown barrier "
        f"and is gone ({reason})",
        reason=reason,
    )


def _gather(state: RpcState, key: str, value: Any, deadline: float | None) -> dict[int, Any]:
    future: ConcurrentFuture[dict[int, Any]] = ConcurrentFuture()

    def done(ok: bool, reply: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(reply)
        elif isinstance(reply, ActorError) and isinstance(reply.cause, Exception):
            # Rank 0's verdict (which worker is gone), not the wrapping of it. First: the
            # wrapping of a WorkerDiedError is one too, and is not about rank 0.
            cause = reply.cause
            if getattr(cause, "reason", None) == _LEFT_UNANSWERED:
                # Rank 0 took our round, then left without the barrier: say so.
                cause = _leader_left(state, str(cause))
            future.set_exception(cause)
        elif isinstance(reply, WorkerDiedError):
            # Rank 0 left before the request reached its agent: say who, as leader_gone.
            future.set_exception(_leader_left(state, reply.reason or str(reply)))
        else:
            future.set_exception(reply)

    def leader_gone(rank: int, reason: str, died: bool) -> None:
        # Rank 0 may leave without the barrier (graceful=False) and live on.
        if rank == 0 and not future.done():
            future.set_exception(_leader_left(state, reason))

    left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
    state.peer_listeners.append(leader_gone)
    try:
        state.request(
            0,
            "barrier",
            (state.me.id, key, value),
            done,
            what="the RPC shutdown barrier",
            timeout=left,
            counted=False,
        )
        # Also look at rank 0's fate now and then: a departure noticed while this round
        # was being set up must not leave the barrier waiting for an answer that will
        # never come.
        while True:
            try:
                return future.result(timeout=_LEADER_CHECK)
            except TimeoutError:
                gone = state.gone.get(0)
                if gone is not None:
                    raise _leader_left(state, gone) from None
    finally:
        state.peer_listeners.remove(leader_gone)


# -- shutdown -------------------------------------------------------------------------------


def graceful_shutdown(state: RpcState, timeout: float | None) -> None:
    """Wait until every worker reached shutdown and no message is in flight anywhere.

    Raises:
        WorkerDiedError: a worker died or left without waiting for the others.
        RpcTimeoutError: ``timeout`` seconds passed first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    # The n-th barrier of each worker meets the n-th of the others (torch's
    # _wait_all_workers and a graceful shutdown are the same barrier).
    state.barriers += 1
    prefix = f"{state.barriers}/"
    _gather(state, f"{prefix}arrive", None, deadline)
    history: list[tuple[int, int]] = []
    for number in itertools.count():
        if not state.wait_idle(deadline):
            raise RpcTimeoutError(
                f"RPC shutdown: {state.me} still had requests in flight after {timeout:g} s"
            )
        counts = _gather(state, f"{prefix}quiesce-{number}", state.counters(), deadline)
        totals = (sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values()))
        history.append(totals)
        stable = len(history) >= 2 and history[-1] == history[-2]
        settled = history[-_STABLE_ROUNDS:] == [totals] * _STABLE_ROUNDS
        if stable and (totals[0] == totals[1] or settled):
            return
        if not stable and number > 2:
            # Messages are still moving (a callback sending more, say): give them a moment.
            time.sleep(min(0.001 * 2**number, 0.05))


def teardown(state: RpcState) -> None:
    """Leave the group locally: answer watchers, stop the agent, release threads."""
    if state.closed:
        return
    state.closed = True
    set_current(None)
    runtime = state.runtime
    for call in state.watch_calls:
        call.on_done = None
        runtime.forget(call.req_id)

    def say_goodbye() -> None:
        for waiter in state.watchers:
            if not waiter.done():
                waiter.set_result(None)
        # Whatever else the agent still owes (a barrier round, a fetch) will not come.
        error = WorkerDiedError(
            f"{state.me} left the RPC group before answering", reason=_LEFT_UNANSWERED
        )
        for reply in list(state.open_replies):
            if not reply.done():
                reply.set_exception(error)

    with contextlib.suppress(RuntimeError):
        runtime.call_soon(say_goodbye)
    state.deadlines.close()
    state.pool.shutdown()
    state.callbacks.shutdown()
    state.store = None
    with contextlib.suppress(Exception):
        own = runtime.connection(runtime.listen_path)
        runtime.send(own, headers.StopMesh(0, state.agents[state.me.id]), [])
    # Frames still queued on the loop (the last barrier's answers, the goodbyes) leave
    # before this returns: the process may exit at once, without atexit handlers (a
    # multiprocessing child ends with os._exit), and peers would find them lost.
    if not runtime.in_loop_thread():
        with contextlib.suppress(Exception):
            runtime.run_sync(_loop_turns(3), timeout=2.0)


async def _loop_turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)
