"""The RPC state of this process: who is in the group, and how messages reach them.

Created by ``init_rpc`` once the rendezvous has produced the directory, dropped by
``shutdown``. It owns the thread pool that runs incoming RPCs, the clock that expires
outgoing ones, the per-process tables (RRefs, autograd contexts; attached by their
modules as listeners) and the counters a graceful shutdown uses to know that no message
is still on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core import dumps, headers
from .._exceptions import ActorDiedError
from .._hosts import Runtime
from ._calls import Call, Deadlines, OnDone
from ._errors import RpcNotInitialized, WorkerDiedError
from ._pool import WorkerPool
from ._worker_info import WorkerInfo

if TYPE_CHECKING:
    from ._rendezvous import Member

__all__ = ["RpcState", "current", "current_or_none", "set_current"]

log = logging.getLogger("actormesh.rpc")

PeerListener = Callable[[int, str, bool], None]

_current: RpcState | None = None


def current() -> RpcState:
    """This process' RPC state.

    Raises:
        RpcNotInitialized: ``init_rpc`` has not been called (or ``shutdown`` has).
    """
    state = _current
    if state is None:
        raise RpcNotInitialized(
            "RPC has not been initialized in this process: call actormesh.rpc.init_rpc first"
        )
    return state


def current_or_none() -> RpcState | None:
    """This process' RPC state, or ``None``."""
    return _current


def set_current(state: RpcState | None) -> None:
    """Install (or drop, with ``None``) this process' RPC state."""
    global _current
    _current = state


class RpcState:
    """Membership, ids, sending and accounting for one ``init_rpc`` of this process.

    Args:
        runtime: the process' actormesh runtime.
        me: this worker's rank.
        members: every worker's directory entry, by rank.
        rpc_timeout: default seconds per call (0: no limit).
        num_worker_threads: size of the pool that runs incoming RPCs.
    """

    def __init__(
        self,
        runtime: Runtime,
        me: int,
        members: list[Member],
        rpc_timeout: float,
        num_worker_threads: int,
    ) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.workers = [WorkerInfo(m.name, m.rank) for m in members]
        self.me = self.workers[me]
        self.by_name = {w.name: w for w in self.workers}
        self.paths = [m.path for m in members]
        self.agents = [m.agent for m in members]
        self.rpc_timeout = rpc_timeout
        self.pool = WorkerPool(num_worker_threads, "actormesh-rpc")
        # Where futures handed to the program complete, so their callbacks run there (as
        # torch runs them on its RPC threads) and may block without stalling the I/O.
        self.callbacks = WorkerPool(num_worker_threads, "actormesh-rpc-callback")
        self.deadlines = Deadlines(runtime)
        self.closed = False
        # Workers that died or shut down, with the reason.
        self.gone: dict[int, str] = {}
        self.peer_listeners: list[PeerListener] = []
        # Tables attached by other modules (RRefs, autograd), by name.
        self.tables: dict[str, Any] = {}
        self._ids = itertools.count()  # from 0, as torch numbers RRefs and forks
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._sent = 0
        self.processed = 0  # incoming messages fully handled (loop thread only)
        self.watch_calls: list[Call] = []
        self.watchers: list[asyncio.Future[Any]] = []
        # Replies the agent still owes (loop thread only).
        self.open_replies: set[asyncio.Future[Any]] = set()
        # The FileStore of a file:// rendezvous, kept while in the group (as torch does).
        self.store: Any = None
        self.barriers = 0  # graceful barriers this worker has entered (see _shutdown)

    # -- names and ids --------------------------------------------------------------------

    def worker(self, to: object) -> WorkerInfo:
        """The worker named by a name, a rank or a ``WorkerInfo``.

        Raises:
            ValueError: no such worker in the group.
        """
        if isinstance(to, WorkerInfo):
            if 0 <= to.id < len(self.workers) and self.workers[to.id] == to:
                return to
        elif isinstance(to, str):
            found = self.by_name.get(to)
            if found is not None:
                return found
        elif isinstance(to, int):
            if 0 <= to < len(self.workers):
                return self.workers[to]
        else:
            raise TypeError(
                f"a destination must be a worker name, a rank or a WorkerInfo, not {to!r}"
            )
        names = ", ".join(w.name for w in self.workers)
        raise ValueError(f"could not find destination worker {to!r}; the group has: {names}")

    def new_id(self) -> tuple[int, int]:
        """A globally unique id: (this worker's rank, a local counter)."""
        return (self.me.id, next(self._ids))

    # -- sending --------------------------------------------------------------------------

    def request(
        self,
        dest: int,
        endpoint: str,
        args: tuple[Any, ...],
        on_done: OnDone,
        *,
        what: str,
        timeout: float | None,
        counted: bool = True,
        direct_reply: bool = False,
    ) -> Call:
        """Send a request to ``dest``'s agent; ``on_done(ok, value)`` runs on the loop thread.

        ``counted`` requests hold up a graceful shutdown until they finish. With
        ``direct_reply`` the agent answers with a REPLY frame of its own, sent by whichever
        thread finishes the work (see ``reply``): the request id travels as the second
        argument and the frame asks the runtime for no reply.
        """
        call = Call(self.runtime, what, on_done, timeout, self._finished if counted else None)
        if counted:
            with self._lock:
                self._inflight += 1
                self._sent += 1
        gone = self.gone.get(dest)
        if gone is not None or self.closed:
            reason = gone or "RPC has shut down in this process"
            message = f"{what} failed: {self.workers[dest]} is gone ({reason})"
            self._fail_soon(call, WorkerDiedError(message, reason=reason))
            return call
        try:
            conn = self.runtime.connection(self.paths[dest])
            call.conn = conn
            call.req_id = self.runtime.register(call)
            if direct_reply:
                args = (args[0], call.req_id, *args[1:])
            payload, buffers = dumps((args, {}))
            header_id = 0 if direct_reply else call.req_id
            header = headers.Call(header_id, self.agents[dest], (dest,), endpoint)
            self.runtime.send(conn, header, [payload, *buffers])
        except ActorDiedError as error:
            self.runtime.forget(call.req_id)
            reason = error.reason or str(error)
            self._fail_soon(call, WorkerDiedError(f"{what} failed: {reason}", reason=reason))
            return call
        except BaseException as error:
            self.runtime.forget(call.req_id)
            self._fail_soon(call, error)
            return call
        if timeout is not None:
            self.deadlines.add(call)
        return call

    def post(self, dest: int, endpoint: str, args: tuple[Any, ...]) -> None:
        """Send a message that wants no reply; lost silently if ``dest`` is gone."""
        if dest in self.gone or self.closed:
            return
        with self._lock:
            self._sent += 1
        try:
            payload, buffers = dumps((args, {}))
            conn = self.runtime.connection(self.paths[dest])
            header = headers.Call(0, self.agents[dest], (dest,), endpoint)
            self.runtime.send(conn, header, [payload, *buffers])
        except Exception:
            log.debug("dropped a %r message to worker %d", endpoint, dest, exc_info=True)

    def reply(self, dest: int, req_id: int, value: Any) -> None:
        """Answer a ``direct_reply`` request of ``dest`` from any thread (lost silently if
        ``dest`` is gone: its call fails on its own)."""
        try:
            payload, buffers = dumps(value)
            conn = self.runtime.connection(self.paths[dest])
            self.runtime.send(conn, headers.Reply(req_id, self.me.id, True), [payload, *buffers])
        except Exception:
            log.debug("could not answer request %d of worker %d", req_id, dest, exc_info=True)

    def _fail_soon(self, call: Call, error: BaseException) -> None:
        try:
            self.runtime.call_soon(call.finish, False, error)
        except RuntimeError:  # the loop is closed: finish here
            call.finish(False, error)

    def _finished(self) -> None:
        with self._lock:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.notify_all()

    @property
    def inflight(self) -> int:
        """Counted requests of this process still waiting for their outcome."""
        with self._lock:
            return self._inflight

    def counters(self) -> tuple[int, int]:
        """(messages sent, incoming messages handled), for shutdown's quiescence check."""
        with self._lock:
            return self._sent, self.processed

    def wait_idle(self, deadline: float | None) -> bool:
        """Wait until no counted request of this process is pending; False on timeout."""
        with self._lock:
            while self._inflight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # -- running on the pool ----------------------------------------------------------------

    def complete_later(self, job: Callable[[], None]) -> None:
        """Run ``job``, which completes a future the program holds, on a callback thread
        (here, once RPC has shut down)."""
        try:
            self.callbacks.submit(job)
        except RuntimeError:
            job()

    def resolve(
        self, future: asyncio.Future[Any], value: Any = None, error: BaseException | None = None
    ) -> None:
        """Complete a loop future from any thread (no-op if done or the loop is closed)."""
        if self.runtime.in_loop_thread():
            _complete(future, value, error)
            return
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_complete, future, value, error)

    # -- peers ----------------------------------------------------------------------------

    def peer_gone(self, rank: int, reason: str, died: bool) -> None:
        """Worker ``rank`` died (``died``) or shut down; tell every listener (loop thread)."""
        if rank in self.gone or rank == self.me.id:
            return
        self.gone[rank] = reason
        if died:
            log.warning("RPC worker %s died: %s", self.workers[rank], reason)
        for listener in list(self.peer_listeners):
            try:
                listener(rank, reason, died)
            except Exception:
                log.exception("a peer-loss listener failed")


def _complete(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
