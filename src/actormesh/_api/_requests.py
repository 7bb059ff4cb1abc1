"""Requests: one endpoint call's replies, on their way back to its caller.

A request (``_Request``) is the core's ``ReplyHandler`` for one call to some ranks of one
mesh: it knows which ranks still owe an answer and on which connection, turns replies
into the caller's ``Future``, ``ValueMesh`` or stream, and fails exactly the ranks that
were waiting on a connection that is lost. Handlers run on the runtime's loop thread.
The adverbs (``_adverbs``) make them; casts by plan (``_planned``) follow a whole mesh's
ranks at the cost of one.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._core import RECORDER, dumps, headers, loads, raised_error
from .._core import otel as _otel
from .._exceptions import (
    ActorDiedError,
    ActorError,
    CallTimeoutError,
    MeshStoppedError,
    endpoint_call,
    endpoint_named,
)
from .._hosts import Runtime
from .._shape import ValueMesh, run_ranks
from ._actor import point_of
from ._future import Future
from ._mesh_state import MeshState, stopped_event
from ._supervision import actor_name
from ._timeouts import INSPECT_WAIT, Inspection, timeout_error

if TYPE_CHECKING:
    from .._transport import Connection
    from ._actor_mesh import ActorMesh

__all__ = ["ValueStream", "fail_calls_to_stopped"]

R = TypeVar("R")


class _Request:
    """The replies of one request to some ranks of one mesh (a core ``ReplyHandler``)."""

    # Whether replies may come back on the caller's own event loop (see _reply_routes).
    routed = True
    # Whether a host agent may hold its workers' replies and send them as one (the caller
    # waits for all of them anyway).
    gathers = False
    # A reducing call's combine function, pickled: host agents fold their workers' values.
    combine: bytes | None = None
    # Set on the instance only when tracing or the timeline is on (class defaults: no
    # per-call assignments for the observability that is off).
    span: Any = None  # its OpenTelemetry span (``_otel``), when tracing is on
    failed = False  # an answer was an error (the span says so)
    sent_at = 0.0  # when it was sent, for the caller's timeline (``RECORDER``)
    # The runtime's topology count read just before its frames found their way (see
    # CoreRuntime.fail_connection): -1, not yet.
    routed_at = -1

    def __init__(self, mesh: ActorMesh[Any], endpoint: str, ranks: tuple[int, ...]) -> None:
        self.runtime = Runtime.get()
        self.mesh = mesh
        self.ref = mesh._ref
        self.state = mesh._state
        self.endpoint = endpoint
        self.ranks = ranks
        # rank -> the connection its answer will come on (None: not sent yet)
        self.outstanding: dict[int, Connection | None] = {}
        self.started: dict[int, float] = {}
        self.req_id = 0
        self.finished = False
        # Made on a foreign event loop: its replies are read there (see _reply_routes).
        route = self.runtime.reply_route() if self.routed else None
        self.route = route if route is not None and route.begin() else None
        # Kept for re-sending when the endpoint is idempotent and its process restarts.
        self.resend: dict[str, list[Any]] | None = None
        options = self.ref.endpoints.get(endpoint)
        if options is not None and options.idempotent:
            self.resend = {}

    # -- sending ------------------------------------------------------------------------

    def send(
        self, frames: list[tuple[str, tuple[int, ...], list[Any]]], *, hold: bool = True
    ) -> None:
        """Register, then send each ``(process path, ranks there, frame parts)``.

        Every rank is marked outstanding before the first frame leaves, so a fast reply
        can never complete the request while later frames are still being sent. Frames to
        a process being restarted wait for the new process (unless ``hold`` is False).
        """
        runtime, unreachable, ready, held = self.runtime, [], [], []
        if _otel.ACTIVE and self.span is None:
            self.span = _otel.call_started(self.ref.name, self.endpoint, len(self.ranks))
        if RECORDER.on and not self.sent_at:
            self.sent_at = time.monotonic()
        for path, ranks, parts in frames:
            if self.resend is not None:
                self.resend[path] = parts
            if hold and runtime.children.relaunching(path):
                held.append((path, ranks, parts))
                conn: Connection | None = None
            else:
                try:
                    conn = runtime.connection(path)
                except ActorDiedError as error:
                    # Outstanding until failed (on the loop, soon): the replies of the
                    # other ranks must not complete the request without it.
                    unreachable.append((ranks, error.reason))
                    conn = None
                else:
                    ready.append((path, conn, ranks, parts))
            started = self._start(ranks)  # once per frame: one lock, one clock read
            for rank in ranks:
                self.outstanding[rank] = conn
                self.started[rank] = started
        # Noted before the request is registered: the loop may fail the requests routed
        # before a death (``fail_connection(routed_before=)``) at any moment from then on,
        # and one still without its count would be taken for one of them.
        self.routed_at = runtime.topology
        self.req_id = runtime.register(self)
        route = self.route
        outgoing = [
            (conn, ranks, self._header(ranks, route.token_for(path) if route else None), parts)
            for path, conn, ranks, parts in ready
        ]
        gather = self.req_id if self.gathers else 0
        unreachable.extend(runtime.send_frames(outgoing, gather, self.combine))
        for path, ranks, parts in held:
            self._hold(path, ranks, parts)
        for ranks, reason in unreachable:
            runtime.call_soon(self._fail_unreachable, ranks, reason)

    def _hold(self, path: str, ranks: tuple[int, ...], parts: list[Any]) -> None:
        """Send to ``path`` once its restart is over (now, if it already is)."""
        resume = functools.partial(self._send_held, path, ranks, parts)
        if not self.runtime.children.when_back(path, resume):
            self.runtime.call_soon(resume, None)

    def _send_held(
        self, path: str, ranks: tuple[int, ...], parts: list[Any], error: BaseException | None
    ) -> None:
        ranks = tuple(rank for rank in ranks if rank in self.outstanding)
        if not ranks:
            return  # answered otherwise, or abandoned, meanwhile
        try:
            if error is not None:
                raise error
            conn = self.runtime.connection(path)
            self.runtime.send(conn, self._header(ranks), parts)
        except Exception as failure:
            reason = failure.reason if isinstance(failure, ActorDiedError) else str(failure)
            self._fail_unreachable(ranks, reason or str(failure))
            return
        for rank in ranks:
            self.outstanding[rank] = conn

    def _start(self, ranks: tuple[int, ...]) -> float:
        """Count the call to each of ``ranks`` in flight; its start time."""
        return self.state.started(ranks)

    def _header(self, ranks: tuple[int, ...], token: str | None = None) -> headers.Header:
        """The frame header for ``ranks``; with a reply route's ``token``, if it has one,
        and the shape of a slice the call was made on (see ``_message_view``)."""
        view = self.mesh._message_view()
        header = headers.make(
            headers.Call,
            (self.req_id, self.ref.mesh_id, ranks, self.endpoint, token, None, view, None),
        )
        return header if self.span is None else _otel.with_trace(header, self.span)

    def _fail_unreachable(self, ranks: tuple[int, ...], reason: str) -> None:
        for rank in ranks:
            self.outstanding.pop(rank, None)
            started = self.started.pop(rank, None)
            if started is not None:  # counted in flight, then the send failed
                self.state.finished(rank, started, False)
            self._died(rank, reason)
        self._after_losses()
        if not self.outstanding:
            self._completed()
            self.runtime.forget(self.req_id)

    # -- ReplyHandler -------------------------------------------------------------------

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if self.outstanding.pop(rank, None) is None:
            return not self.outstanding
        started = self.started.pop(rank, None)
        if started is not None:
            self.state.finished(rank, started, ok)
        if ok:
            if self.state.dead:  # (checked inline: this runs for every reply)
                self._answered(rank)
            try:
                value = loads(parts[0], parts[1:])
            except Exception as error:
                self._error(
                    rank,
                    ActorError.wrap(
                        error,
                        endpoint=self.endpoint,
                        mesh=self.ref.name,
                        point=dict(point_of(self.ref, rank)),
                        remote_traceback="(the value could not be unpickled here)",
                    ),
                )
            else:
                self._value(rank, value)
        else:
            self.failed = True
            raised = raised_error(parts[0])
            if self.state.dead and not isinstance(raised, ActorDiedError):
                # Not "this actor is gone" (the answer for one dropped after a failure).
                self._answered(rank)
            init_error = self.state.init_errors.get(rank)
            if (
                init_error is not None
                and isinstance(raised, MeshStoppedError)
                and not getattr(raised, "as_sent", False)
                and getattr(raised, "mesh", None) == self.ref.mesh_id
            ):
                # The call raced the clean-up of its mesh's failed spawn: the process
                # forgot the mesh before it came and said it has no such actor (naming
                # the mesh by id). The spawn's error is the answer, as it is for every
                # call made after.
                raised = init_error
            self._error(rank, raised)
        if not self.outstanding:
            self._completed()
            return True
        return False

    def _answered(self, rank: int) -> None:
        if rank not in self.state.init_errors:
            # It answered: alive (restarted, say). Not a rank whose __init__ raised: its
            # process answers for it, and it stays gone.
            self.state.dead.pop(rank, None)

    def on_lost(self, conn: Connection, reason: str) -> bool:
        # A snapshot: replies read on the caller's own loop (a reply route) may pop ranks
        # from another thread meanwhile.
        lost = [rank for rank, known in list(self.outstanding.items()) if known is conn]
        if not lost:
            return False
        path = conn.peer
        children = self.runtime.children
        if self.resend is not None and path in self.resend and children.relaunching(path):
            # Idempotent: run it again on the restarted process rather than fail it.
            for rank in lost:
                self.outstanding[rank] = None
            self._hold(path, tuple(lost), self.resend[path])
            return False
        for rank in lost:
            if self.outstanding.pop(rank, None) is None:
                continue  # answered meanwhile (whoever pops a rank settles it)
            started = self.started.pop(rank, None)
            if started is not None:
                self.state.finished(rank, started, False)
            self._died(rank, reason)
        self._after_losses()
        if not self.outstanding:
            self._completed()
            return True
        return False

    def _after_losses(self) -> None:
        """Ranks were just lost together (one process, or one failed send): a subclass
        may settle now rather than wait for the others' answers."""

    def _died(self, rank: int, reason: str) -> None:
        point = point_of(self.ref, rank).brief()
        if self.state.stopped:
            self._error(
                rank,
                MeshStoppedError(
                    f"actor mesh '{self.ref.name}' was stopped{self.state.stop_reason} before "
                    f"actor {point} answered {endpoint_named(self.endpoint)} "
                    f"({stopped_event(self.state)})"
                ),
            )
            return
        self.state.dead.setdefault(rank, reason)
        # Monarch's words first (programs match on them), then which actor and why.
        who = actor_name(self.state, rank) or f"{self.ref.name}{point}"
        error = ActorDiedError(
            f"{endpoint_call(self.ref.name, self.endpoint)} failed, The actor {who} and all "
            f"its descendants have failed: actor {point} of mesh '{self.ref.name}' died "
            f"before answering {endpoint_named(self.endpoint)}: {reason}",
            reason=reason,
            ranks=(rank,),
        )
        self._error(rank, error)

    # -- outcomes (subclasses) ------------------------------------------------------------

    def _value(self, rank: int, value: Any) -> None:
        raise NotImplementedError

    def _error(self, rank: int, error: BaseException) -> None:
        raise NotImplementedError

    def _complete(self) -> None:
        """All ranks have answered or failed."""

    def _completed(self) -> None:
        """All ranks have answered or failed: end the call's span (if traced), then
        ``_complete``."""
        if self.span is not None:
            _otel.call_ended(self.span, self.ref.name, self.endpoint, self.failed)
            self.span = None
        if self.sent_at and RECORDER.on:
            RECORDER.called(
                self.ref.mesh_id, self.ref.name, self.endpoint, self.req_id, self.sent_at,
                len(self.ranks), not self.failed,
            )  # fmt: skip
        self._complete()

    # -- waiting ------------------------------------------------------------------------

    def _pending(self) -> dict[int, Connection | None]:
        # Read from the waiting thread while the loop may change it: retry a torn copy.
        while True:
            try:
                return dict(self.outstanding)
            except RuntimeError:
                continue

    def timeout_error(self, timeout: float | None) -> CallTimeoutError:
        """The error of a wait that ran out: who had not answered, and what each was doing.

        Off the loop thread this asks the actors' processes (waiting up to ``INSPECT_WAIT``);
        on it, where it cannot wait, the error names the ranks only.
        """
        pending = self._pending()
        answers: dict[int, dict[str, Any]] = {}
        if pending and not self.runtime.in_loop_thread():
            inspection = Inspection(self.runtime, self.ref.mesh_id, self.req_id, pending)
            inspection.start()
            answers = inspection.wait(INSPECT_WAIT)
        return self._timeout_error(timeout, pending, answers)

    def _timeout_error(
        self,
        timeout: float | None,
        pending: dict[int, Connection | None],
        answers: dict[int, dict[str, Any]],
    ) -> CallTimeoutError:
        return timeout_error(
            timeout,
            mesh=self.ref.name,
            endpoint=self.endpoint,
            points={rank: point_of(self.ref, rank).brief() for rank in self.ranks},
            pending=sorted(pending),
            answers=answers,
        )

    def arm_deadline(self, seconds: float) -> None:
        """Time the request out ``seconds`` from now, whoever waits (loop thread)."""
        self.runtime.loop.call_later(seconds, self._deadline_passed, seconds)

    def _deadline_passed(self, seconds: float) -> None:
        if not self.outstanding:
            return  # answered, failed or abandoned meanwhile
        pending = dict(self.outstanding)

        def expire(answers: dict[int, dict[str, Any]]) -> None:
            if self.outstanding:
                self._give_up(self._timeout_error(seconds, pending, answers))
                self.abandon()

        inspection = Inspection(self.runtime, self.ref.mesh_id, self.req_id, pending, expire)
        inspection.start()
        self.runtime.loop.call_later(INSPECT_WAIT, inspection.finish)

    def _give_up(self, error: BaseException) -> None:
        """The request timed out with ``error`` (subclasses deliver it to their waiter)."""
        raise NotImplementedError

    def abandon(self) -> None:
        """The caller gave up (timeout, cancellation): drop late replies, cancel the calls."""
        if self.span is not None:
            _otel.call_ended(self.span, self.ref.name, self.endpoint, True)
            self.span = None
        self.runtime.forget(self.req_id)
        self.runtime.call_soon(self._abandon_on_loop)

    def _abandon_on_loop(self) -> None:
        by_conn: dict[Connection, list[int]] = {}
        for rank, conn in list(self.outstanding.items()):  # see on_lost
            if conn is not None:
                by_conn.setdefault(conn, []).append(rank)
        for conn, ranks in by_conn.items():
            # Best effort: a process that is gone has nothing left to cancel.
            with contextlib.suppress(ActorDiedError):
                self.runtime.send(
                    conn, headers.Cancel(self.req_id, self.ref.mesh_id, tuple(ranks)), []
                )
        for rank, started in list(self.started.items()):
            self.state.finished(rank, started, False)
        self.started.clear()
        self.outstanding.clear()

    def new_future(self) -> Future[Any]:
        runtime = self.runtime
        future: Future[Any] = Future._new(
            runtime.in_loop_thread,
            self.timeout_error,
            self.abandon,
            self.route,
            spin=len(self.ranks) == 1,
        )
        deadline = runtime.config.default_timeout
        if deadline is not None:
            runtime.call_soon(self.arm_deadline, deadline)
        return future


def fail_calls_to_stopped(state: MeshState) -> None:
    """Fail every call to ``state``'s mesh that still waits, from the loop thread: the mesh
    was stopped, and its callers hear that from the stop itself, in its words, whatever
    each actor does meanwhile (one deep in a ``def`` endpoint may never answer)."""
    runtime = Runtime.get()

    def fail() -> None:
        for request in runtime.pending():
            if isinstance(request, _Request) and request.state is state and request.outstanding:
                request._fail_unreachable(tuple(request.outstanding), "its mesh was stopped")

    runtime.call_soon(fail)


class _Gather(_Request):
    """``call``: a ValueMesh of every rank's value; the first endpoint error fails it."""

    gathers = True

    def __init__(
        self,
        mesh: ActorMesh[Any],
        endpoint: str,
        transform: Callable[[ValueMesh[Any]], Any] | None = None,
    ) -> None:
        super().__init__(mesh, endpoint, mesh._shape.ranks)
        self.future = self.new_future()
        self.values: dict[int, Any] = {}
        self.deaths: dict[int, BaseException] = {}
        self.transform = transform

    def _value(self, rank: int, value: Any) -> None:
        self.values[rank] = value

    def _error(self, rank: int, error: BaseException) -> None:
        if isinstance(error, ActorDiedError | MeshStoppedError):
            self.deaths[rank] = error
        else:
            self.future._set_exception(error)

    def _give_up(self, error: BaseException) -> None:
        self.future._set_exception(error)

    def _after_losses(self) -> None:
        # A member died: the call fails now (docs/architecture.md, "Call paths"), not when
        # the others are done (a survivor may run for minutes): with the answers that came
        # so far.
        if self.deaths:
            self._fail_with_deaths()

    def _fail_with_deaths(self) -> None:
        if self.future.done():
            return
        first = next(iter(self.deaths.values()))
        if not isinstance(first, ActorDiedError):
            self.future._set_exception(first)
            return
        ranks = tuple(sorted(self.deaths))
        message = str(first)
        if len(ranks) > 1:
            message = f"{len(ranks)} actors of mesh '{self.ref.name}' died; first: {message}"
        self.future._set_exception(
            ActorDiedError(message, reason=first.reason, ranks=ranks, values=dict(self.values))
        )

    def _complete(self) -> None:
        if self.future.done():
            return
        if self.deaths:
            self._fail_with_deaths()
            return
        try:
            self.future._set_result(self._result())
        except Exception as error:
            self.future._set_exception(error)

    def _result(self) -> Any:
        """The call's value, once every rank answered."""
        shape = self.mesh._shape
        result = ValueMesh(shape, [self.values[rank] for rank in shape.ranks])
        return self.transform(result) if self.transform else result


class _Reduce(_Gather):
    """``reduce``: every rank's value combined into one by an associative and commutative
    function; host agents combine their own workers' values first and answer with one
    ``PARTIAL`` reply each (``_hosts/_reduction.py``)."""

    routed = False  # the answers come through the agents, never on a reply route

    def __init__(self, mesh: ActorMesh[Any], endpoint: str, combine: Callable[[Any, Any], Any]):
        super().__init__(mesh, endpoint)
        self.fold = combine
        self.combine = dumps(combine)[0]  # raises here, at the call, if it cannot travel
        self.folded = 0
        self.value: Any = None

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if rank != headers.PARTIAL:
            return super().on_reply(rank, ok, parts)
        try:
            runs, value = loads(parts[0], parts[1:])
        except Exception as error:
            # Fail the call here rather than leave it waiting for ranks it cannot count.
            self.future._set_exception(error)
            for rank, since in list(self.started.items()):
                self.state.finished(rank, since, False)
            self.started.clear()
            self.outstanding.clear()
            self._completed()
            return True
        for covered in run_ranks(runs):
            if self.outstanding.pop(covered, None) is None:
                continue
            started = self.started.pop(covered, None)
            if started is not None:
                self.state.finished(covered, started, True)
            if self.state.dead:
                self._answered(covered)
        self._value(headers.PARTIAL, value)
        if not self.outstanding:
            self._complete()
            return True
        return False

    def _value(self, rank: int, value: Any) -> None:
        try:
            self.value = value if not self.folded else self.fold(self.value, value)
        except Exception as error:
            self.future._set_exception(error)
        self.folded += 1

    def _result(self) -> Any:
        return self.value


class _One(_Request):
    """``call_one`` and ``choose``: the single rank's plain value."""

    def __init__(self, mesh: ActorMesh[Any], endpoint: str, rank: int) -> None:
        super().__init__(mesh, endpoint, (rank,))
        self.future = self.new_future()

    def _value(self, rank: int, value: Any) -> None:
        self.future._set_result(value)

    def _error(self, rank: int, error: BaseException) -> None:
        self.future._set_exception(error)

    def _give_up(self, error: BaseException) -> None:
        self.future._set_exception(error)


class _Chosen(_One):
    """A ``choose`` call: ``_choose`` counted it in flight when it picked the rank."""

    def __init__(self, mesh: ActorMesh[Any], endpoint: str, rank: int, started: float) -> None:
        super().__init__(mesh, endpoint, rank)
        self.picked_at = started

    def _start(self, ranks: tuple[int, ...]) -> float:
        return self.picked_at


class ValueStream(Generic[R]):
    """Results of ``stream``: one ``Future`` per actor, in the order results arrive.

    ``for fut in mesh.ep.stream(x): fut.get()`` (or ``await fut``): the first future
    yielded resolves with the first result to arrive, whichever actor sent it, and so on,
    as Monarch's ``stream`` does. Iterating never waits; waiting on a future does.
    ``async for value in mesh.ep.stream(x)`` gives the values themselves in that order
    (an endpoint's error is raised in its turn; iterating again goes on with the rest).
    """

    def __init__(self, count: int, arm: Callable[[float], None] | None = None) -> None:
        self._arm = arm
        self._futures: list[Future[R]] = [Future._new() for _ in range(count)]
        self._arrived = 0
        self._lock = threading.Lock()
        self._next = 0  # for async iteration

    def _push(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._arrived >= len(self._futures):
                return
            future = self._futures[self._arrived]
            self._arrived += 1
        if error is None:
            future._set_result(value)
        else:
            future._set_exception(error)

    def _close(self, error: BaseException | None = None) -> None:
        """No more results will come: the futures still waiting get ``error``."""
        with self._lock:
            waiting, self._arrived = self._futures[self._arrived :], len(self._futures)
        for future in waiting:
            future._set_exception(error or RuntimeError("the stream ended without a result"))

    def with_timeout(self, seconds: float) -> ValueStream[R]:
        """Give up on the results still missing ``seconds`` from now: their futures fail
        with ``CallTimeoutError`` naming the actors that had not answered and what each
        was doing; their late results are dropped."""
        if self._arm is not None:
            self._arm(seconds)
        return self

    def __len__(self) -> int:
        return len(self._futures)

    def __iter__(self) -> Iterator[Future[R]]:
        return iter(list(self._futures))

    def __aiter__(self) -> AsyncIterator[R]:
        return self

    async def __anext__(self) -> R:
        if self._next >= len(self._futures):
            raise StopAsyncIteration
        future = self._futures[self._next]
        self._next += 1
        return await future


class _Stream(_Request):
    # A stream has no Future to end its route's count: its replies take the usual way.
    routed = False

    def __init__(self, mesh: ActorMesh[Any], endpoint: str) -> None:
        super().__init__(mesh, endpoint, mesh._shape.ranks)
        self.stream: ValueStream[Any] = ValueStream(len(self.ranks), self._arm)
        deadline = self.runtime.config.default_timeout
        if deadline is not None:
            self._arm(deadline)

    def _arm(self, seconds: float) -> None:
        self.runtime.call_soon(self.arm_deadline, seconds)

    def _value(self, rank: int, value: Any) -> None:
        self.stream._push(value, None)

    def _error(self, rank: int, error: BaseException) -> None:
        self.stream._push(None, error)

    def _give_up(self, error: BaseException) -> None:
        self.stream._close(error)

    def _complete(self) -> None:
        self.stream._close()
