"""Timeouts: the error that says who had not answered, and what each was doing.

Any wait can run out: ``Future.get(timeout)``, ``await future.wait(timeout)``, a stream's
``with_timeout``, or ``Config.default_timeout`` for every call. The request then asks the
processes that still owe it answers what their actors are doing (``Inspection``: one
INSPECT frame per process, answered from that process' loop, so even an actor stuck in a
C call is described), waits briefly for the answers, and words them into one
``CallTimeoutError``. Then the caller abandons the request: late replies are dropped and
the actors are told to cancel it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._core import explain, headers, loads
from .._exceptions import ActorDiedError, CallTimeoutError, endpoint_named
from .._hosts import Runtime

if TYPE_CHECKING:
    from .._transport import Connection

__all__ = ["INSPECT_WAIT", "Inspection", "timeout_error"]

# How long a timed-out caller waits to hear what the actors were doing before it raises.
INSPECT_WAIT = 1.0


class Inspection:
    """Asks the processes behind some ranks what their actors do about request ``call_id``.

    A core ``ReplyHandler``: each process answers once (rank -1) with a ``{rank: answer}``
    pickle. ``on_done`` (if given) runs on the loop thread when every process answered,
    lost its connection, or ``finish()`` was called, whichever comes first.
    """

    def __init__(
        self,
        runtime: Runtime,
        mesh_id: str,
        call_id: int,
        pending: Mapping[int, Connection | None],
        on_done: Callable[[dict[int, dict[str, Any]]], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.answers: dict[int, dict[str, Any]] = {}
        self._mesh_id = mesh_id
        self._call_id = call_id
        self._by_conn: dict[Connection, list[int]] = {}
        for rank, conn in pending.items():
            if conn is not None:
                self._by_conn.setdefault(conn, []).append(rank)
        self._left = len(self._by_conn)
        self._on_done = on_done
        self._done = threading.Event()
        self._req_id = 0

    def start(self) -> None:
        """Send the questions (any thread)."""
        if not self._by_conn:
            self.finish()
            return
        self._req_id = self.runtime.register(self)
        for conn, ranks in self._by_conn.items():
            header = headers.Inspect(self._req_id, self._mesh_id, tuple(ranks), self._call_id)
            try:
                self.runtime.send(conn, header, [])
            except ActorDiedError:
                self.runtime.call_soon(self._count)

    def wait(self, timeout: float) -> dict[int, dict[str, Any]]:
        """Block until answered or ``timeout`` passed (never on the loop thread)."""
        self._done.wait(timeout)
        self.runtime.forget(self._req_id)
        return dict(self.answers)

    def finish(self) -> None:
        """Stop waiting for answers (loop thread); ``on_done`` gets what came."""
        if self._done.is_set():
            return
        self._done.set()
        self.runtime.forget(self._req_id)
        if self._on_done is not None:
            self._on_done(dict(self.answers))

    def _count(self) -> bool:
        self._left -= 1
        if self._left <= 0:
            self.finish()
            return True
        return False

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if ok:
            with contextlib.suppress(Exception):  # an answer we cannot read is no answer
                self.answers.update(loads(parts[0]))
        return self._count()

    def on_lost(self, conn: Connection, reason: str) -> bool:
        return self._count() if conn in self._by_conn else False


def timeout_error(
    timeout: float | None,
    *,
    mesh: str,
    endpoint: str,
    points: Mapping[int, str],
    pending: list[int],
    answers: Mapping[int, dict[str, Any]],
) -> CallTimeoutError:
    """The ``CallTimeoutError`` for a wait on ``endpoint`` that ran out of time."""
    after = f"after {timeout:g} s" if timeout is not None else ""
    head = f"timed out {after} waiting for {endpoint_named(endpoint)} of mesh '{mesh}'"
    runtime = Runtime.current()
    if runtime is not None:
        rank = pending[0] if len(pending) == 1 else None
        runtime.record_event(
            "timeout", mesh=mesh, rank=rank, message=head, endpoint=endpoint, pending=pending
        )
    if not pending:
        return CallTimeoutError(head)
    lines = [
        f"{head}: {len(pending)} of {len(points)} actor(s) had not answered:",
        *(
            "  " + explain(points.get(rank, f"rank {rank}"), answers.get(rank), endpoint)
            for rank in pending
        ),
    ]
    return CallTimeoutError("\n".join(lines), pending=tuple(pending))
