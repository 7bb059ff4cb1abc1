"""Outgoing requests to RPC agents: the reply handler, and the clock that expires them.

A ``Call`` is registered with the runtime like any actor request; its reply, the loss of
its connection, or its deadline (whichever comes first, always on the runtime's loop
thread) finishes it exactly once with ``on_done(ok, value)``: ``ok`` True gives the
agent's reply tuple, False an exception (the agent failed, the worker died, or time ran
out).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core import error_from_payload, loads
from .._exceptions import MeshStoppedError
from ._errors import RpcTimeoutError, WorkerDiedError

if TYPE_CHECKING:
    from .._hosts import Runtime
    from .._transport import Connection

__all__ = ["Call", "Deadlines"]

OnDone = Callable[[bool, Any], None]


class Call:
    """One request to one worker's agent (a core ``ReplyHandler``).

    Args:
        runtime: the process' runtime.
        what: what the call does, for error messages ("rpc_sync(f) to worker 'w1'").
        on_done: receives the outcome, once, on the loop thread.
        timeout: seconds before it fails with ``RpcTimeoutError`` (``None``: never).
        on_finish: called after ``on_done`` (in-flight accounting).
    """

    __slots__ = (
        "__weakref__",
        "conn",
        "finished",
        "on_done",
        "on_finish",
        "req_id",
        "runtime",
        "timeout",
        "what",
    )

    def __init__(
        self,
        runtime: Runtime,
        what: str,
        on_done: OnDone,
        timeout: float | None,
        on_finish: Callable[[], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.what = what
        self.on_done: OnDone | None = on_done
        self.on_finish = on_finish
        self.timeout = timeout
        self.conn: Connection | None = None
        self.req_id = 0
        self.finished = False

    # -- ReplyHandler (loop thread) -------------------------------------------------------

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if ok:
            try:
                value = loads(parts[0], parts[1:])
            except Exception as error:
                self.finish(False, error)
            else:
                self.finish(True, value)
        else:
            failure: BaseException = error_from_payload(parts[0])
            if isinstance(failure, MeshStoppedError):
                # The process lives on, but its RPC agent is gone: it left the group.
                reason = "the worker has shut down RPC"
                failure = WorkerDiedError(f"{self.what} failed: {reason}", reason=reason)
            self.finish(False, failure)
        return True

    def on_lost(self, conn: Connection, reason: str) -> bool:
        if conn is not self.conn:
            return False
        message = f"{self.what} failed: the worker died or became unreachable ({reason})"
        self.finish(False, WorkerDiedError(message, reason=reason))
        return True

    # -- outcomes -------------------------------------------------------------------------

    def expire(self) -> None:
        """The deadline passed (loop thread): fail unless already answered."""
        if self.finished:
            return
        self.runtime.forget(self.req_id)
        ms = round((self.timeout or 0) * 1000)
        self.finish(
            False,
            RpcTimeoutError(
                f"RPCErr:1:RPC ran for more than set timeout ({ms} ms) and will now be marked with "
                f"an error: {self.what}"
            ),
        )

    def finish(self, ok: bool, value: Any) -> None:
        """Deliver the outcome once (loop thread)."""
        if self.finished:
            return
        self.finished = True
        on_done, self.on_done = self.on_done, None
        try:
            if on_done is not None:
                on_done(ok, value)
        finally:
            if self.on_finish is not None:
                self.on_finish()


class Deadlines:
    """Expires calls at their deadline, from one timer thread for the whole process.

    Entries hold weak references, so answered calls are not kept alive; the heap is
    compacted when answered calls dominate it.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._heap: list[tuple[float, int, weakref.ref[Call]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="actormesh-rpc-timer", daemon=True)
        self._thread.start()

    def add(self, call: Call) -> None:
        """Expire ``call`` after its ``timeout`` unless it finishes first."""
        assert call.timeout is not None
        entry = (time.monotonic() + call.timeout, next(self._seq), weakref.ref(call))
        with self._cond:
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify()
            if len(self._heap) > 4096 and len(self._heap) & 4095 == 0:
                self._compact()

    def _compact(self) -> None:
        live = [e for e in self._heap if (c := e[2]()) is not None and not c.finished]
        if len(live) * 2 < len(self._heap):
            heapq.heapify(live)
            self._heap = live

    def _main(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._heap:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                when = self._heap[0][0]
                if when > now:
                    self._cond.wait(when - now)
                    continue
                _, _, ref = heapq.heappop(self._heap)
                call = ref()
                if call is not None and not call.finished:
                    try:
                        self._runtime.call_soon(call.expire)
                    except RuntimeError:  # the runtime's loop is closed: nothing to expire
                        return

    def close(self) -> None:
        """Stop the timer thread; pending deadlines no longer fire."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
