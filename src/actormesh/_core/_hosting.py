"""Hosting actors: the worker side of SPAWN, CALL, CANCEL, INSPECT, OBSERVE and STOP_MESH.

A mixin of ``Runtime``: the actors this process hosts, by mesh id and rank, each behind
its ``Mailbox``; ``_Delivery`` carries one call to one actor and its answer back to the
caller on the connection the call came in on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._config import Config
from .._exceptions import ActorDiedError, MeshStoppedError, endpoint_named
from .._shape import view_shape
from .._transport import Link, TransportClosed
from . import _headers as hdr
from . import _otel, _snapshot
from ._debugger import paused
from ._dispatch import Handler
from ._early_calls import EarlyCalls
from ._error_payload import error_payload
from ._event_loops import new_event_loop
from ._inspect import describe
from ._limits import check_message_size
from ._mailbox import Mailbox
from ._serialization import dumps, loads
from ._timeline import RECORDER

# Seconds a call for a mesh unknown here waits for that mesh's spawn (see _early_calls):
# the spawn is already on its way when the call could be made.
_EARLY_CALL_WAIT = 10.0

__all__ = ["Hosting"]

# Seconds a STOP_MESH reply waits for busy actors to run their close hooks.
_STOP_REPLY_GRACE = 2.0


class _HostedActor:
    __slots__ = ("mailbox", "mesh_id", "mesh_name", "point")

    def __init__(
        self, mailbox: Mailbox, mesh_id: str, mesh_name: str, point: dict[str, int]
    ) -> None:
        self.mailbox = mailbox
        self.mesh_id = mesh_id
        self.mesh_name = mesh_name
        self.point = point


class _Delivery:
    """One call to one hosted actor, and the way back to its caller.

    The answer goes back once: to the caller's request (``req_id``), or to a port named
    by the call (``send(..., port=)``: each actor's answer goes there). An endpoint that
    answers through an explicit response port marks the delivery ``deferred``: its return
    value is then not the answer, the port's ``send`` is (and may come later, from any
    thread).
    """

    __slots__ = (
        "answered",
        "arrived",
        "buffers",
        "cancelled",
        "conn",
        "deferred",
        "endpoint",
        "host",
        "hosted",
        "mesh_id",
        "payload",
        "port",
        "rank",
        "reply_bytes",
        "reply_conn",
        "req_id",
        "trace",
        "view",
    )

    def __init__(
        self,
        host: Hosting,
        conn: Link,
        req_id: int,
        rank: int,
        endpoint: str,
        payload: memoryview,
        buffers: list[memoryview],
        hosted: _HostedActor,
        reply_conn: Link | None = None,
        port: tuple[str, int] | None = None,
        view: tuple[Any, ...] | None = None,
        trace: str | None = None,
    ) -> None:
        self.host = host  # the process' hosting: its limits, links and failure paths
        self.conn = conn  # where the call came in (CANCEL and INSPECT match on it)
        self.port = port  # (address, id) of the port the answer goes to, if any
        self.view = view  # (labels, sizes, ranks) of the slice the call was made on
        self.answered = False
        self.deferred = False
        self.reply_conn = reply_conn  # the caller's reply route, when it has one here
        self.req_id = req_id
        self.rank = rank
        self.endpoint = endpoint
        self.payload = payload
        self.buffers = buffers
        self.hosted = hosted  # its mesh's name and the actor's point, for errors
        # Its mesh's id, fixed for the actor's life: an attribute, not a property, since
        # the timeline reads it for every message.
        self.mesh_id = hosted.mesh_id
        self.cancelled = False
        # For its span in the process' timeline (``_timeline``) and its metrics
        # (``_otel``), when either is kept; the caller's trace context, if it sent one.
        self.arrived = time.monotonic() if RECORDER.on or _otel.ACTIVE else 0.0
        self.reply_bytes = 0
        self.trace = trace  # the caller's trace context (OpenTelemetry), if it sent one

    @property
    def mesh_name(self) -> str:
        """The actor's mesh name (read from its id until the spawn's spec is loaded)."""
        return self.hosted.mesh_name

    @property
    def point(self) -> dict[str, int]:
        """The actor's coordinates (empty until the spawn's spec is loaded)."""
        return self.hosted.point

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs = loads(self.payload, self.buffers)
        return args, kwargs

    def succeed(self, value: Any) -> None:
        if self.deferred:
            return  # the endpoint answers through its response port
        self.answer(value)

    def answer(self, value: Any) -> None:
        """Send ``value`` as the answer (once; any thread)."""
        if self.answered or (self.req_id == 0 and self.port is None):
            return
        self.answered = True
        try:
            payload, buffers = dumps(value)
            if RECORDER.on or _otel.ACTIVE:
                self.reply_bytes = len(payload)
                if buffers:  # most answers have none: no generator made for them
                    self.reply_bytes += sum(b.raw().nbytes for b in buffers)
            max_bytes = self.host.config.max_message_bytes
            if len(payload) > max_bytes or buffers:
                what = f"the value returned by {endpoint_named(self.endpoint)}"
                check_message_size([payload, *buffers], max_bytes, what)
        except Exception as error:
            self.answered = False
            self.fail(error)
            return
        self._answer(True, [payload, *buffers])

    def fail(self, error: BaseException, as_sent: bool = False) -> None:
        """Send ``error`` as the answer (once; any thread); ``as_sent``: the caller raises
        ``error`` itself (``port.exception(e)``), not an ``ActorError`` around it."""
        if self.answered:
            return
        self.answered = True
        # As in Monarch, a BaseException ends the actor, and so does an exception that
        # escapes an endpoint which said it answers through its response port.
        ends = not as_sent and (
            self.deferred or not isinstance(error, (Exception, asyncio.CancelledError))
        )
        payload = error_payload(
            error,
            mesh=self.mesh_name,
            point=self.point,
            endpoint=self.endpoint,
            as_sent=as_sent,
            ends_actor=ends,
        )
        unanswered = self.req_id == 0 and self.port is None
        if not unanswered:
            self._answer(False, [payload])
            if not ends:
                return
        # Nobody waits for this answer, or the failure ends the actor: the failure goes to
        # whoever spawned the mesh (not to the sender, who may only hold a reference to
        # it), and the actor is dropped, as Monarch drops it: no further message runs, and
        # its __cleanup__ gets the error.
        # Without a known spawner (an actor hosted by host()), the sender hears of it.
        self.hosted.mailbox.halt()
        told = self.host.escalate(self.mesh_id, self.rank, self.endpoint, payload)
        if not told and unanswered:
            header = hdr.encode(hdr.Failure(self.mesh_id, self.rank, self.endpoint))
            with contextlib.suppress(TransportClosed):
                self.conn.send([header, payload])
        self.host.drop_actor(self.mesh_id, self.rank, error)

    def fail_init(self, error: BaseException) -> None:
        """The actor's ``__init__`` raised before this message ran: the caller gets the
        ``ActorInitError`` that calls arriving after the failure get."""
        self._answer_if_awaited(
            error_payload(
                error, mesh=self.mesh_name, point=self.point, endpoint="__init__", init=True
            )
        )

    def abandon(self, error: BaseException, as_sent: bool = False) -> None:
        """The actor was stopped or dropped before this message ran."""
        self._answer_if_awaited(
            error_payload(
                error,
                mesh=self.mesh_name,
                point=self.point,
                endpoint=self.endpoint,
                as_sent=as_sent,
            )
        )

    def _answer_if_awaited(self, payload: bytes) -> None:
        # A message nobody waits on (a broadcast) that never ran is no failure of its own:
        # whatever stopped its actor is reported (or was asked for) already.
        if self.answered:
            return
        self.answered = True
        if self.req_id == 0 and self.port is None:
            return
        self._answer(False, [payload])

    def _message_rank(self) -> int:
        """The actor's rank in the slice the call was made on (what a ranked port
        receiver reports, as Monarch's does)."""
        if self.view is None:
            return self.rank
        try:
            return view_shape(*self.view).index_of_rank(self.rank)
        except ValueError:
            return self.rank

    def _answer(self, ok: bool, parts: list[Any]) -> None:
        port = self.port
        if port is not None:
            address, port_id = port
            header = hdr.encode(hdr.Reply(port_id, self._message_rank(), ok))
            with contextlib.suppress(TransportClosed, OSError, ActorDiedError):
                self.host.links.connection(address).send([header, *parts])
            return
        parts = [hdr.encode_reply(self.req_id, self.rank, ok), *parts]
        # On the caller's reply route if it has one; else, or if that route has closed,
        # on the connection the call came in on (the caller's runtime reads that one).
        route = self.reply_conn
        if route is not None:
            try:
                route.send(parts)
                return
            except TransportClosed:
                self.reply_conn = None
        with contextlib.suppress(TransportClosed):
            self.conn.send(parts)


class _SpawnSpec:
    """A spawn's spec, loaded by the first of its actors' threads to need it.

    Unpickling the spec imports the actor class' module, which can take seconds (torch,
    a model library) or minutes. On the process' loop that would stop everything it
    answers meanwhile: heartbeats (the owner would kill a healthy worker after
    ``Config.heartbeat_timeout``), reply-route confirmations, other actors' calls. So it
    is done on the actors' threads, once, under a lock.

    The lock is one for the process, not one per spawn: spawns made one after another
    load on several threads at once, and two threads importing torch together can each
    get the other's half-initialized modules (Python breaks the import cycle that way),
    so specs are loaded one at a time.
    """

    _lock = threading.Lock()

    def __init__(self, mesh_id: str, parts: list[memoryview]) -> None:
        self.mesh_id = mesh_id
        self.mesh_name = mesh_id.rsplit("-", 1)[0]
        self._parts: list[memoryview] | None = parts  # views over a copy: they stay valid
        self._spec: Any = None
        self._error: BaseException | None = None

    def actor(self, rank: int) -> tuple[Callable[[], Any], str, dict[str, int]]:
        """``(factory, mesh name, point)`` of ``rank``; raises when the spec cannot be
        loaded here (the actor's ``__init__`` fails with it)."""
        with self._lock:
            if self._parts is not None:
                parts, self._parts = self._parts, None
                try:
                    self._spec = loads(parts[1], parts[2:])
                except BaseException as error:  # (a module's SystemExit too: every rank fails)
                    self._error = error
        if self._error is not None:
            # The actor class (or an argument) cannot be loaded here: every rank fails its
            # construction with the import error, and this interpreter's path to explain it.
            cause = self._error
            raise RuntimeError(
                f"the worker (pid {os.getpid()}) cannot load what the spawn of mesh "
                f"{self.mesh_id!r} needs, the actor class or its arguments: "
                f"{type(cause).__name__}: {cause} (is its module importable by workers? "
                f"their sys.path: {sys.path})"
            ) from cause
        actor: tuple[Callable[[], Any], str, dict[str, int]] = self._spec.actor(rank)
        return actor


class Links(Protocol):
    """What hosting needs of the process' runtime below it: a link to any process by its
    address (a port's, for answers sent there), and a way onto the loop thread."""

    def connection(self, path: str) -> Link: ...

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None: ...


class Hosting:
    """The actors hosted in this process: their mailboxes, and the frames that spawn,
    call, cancel, inspect and stop them (``handlers``). A part of the process' runtime,
    which gives it its links; it runs over any ``Link``."""

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop, links: Links) -> None:
        self.config = config
        self.loop = loop
        self.links = links
        self.hosted: dict[str, dict[int, _HostedActor]] = {}
        self._spawners: dict[str, Link] = {}  # mesh id -> who spawned it here
        # (mesh id, rank) -> what calls to an actor that is not here get: the error of its
        # __init__ (or of loading its class), or why it was dropped.
        self._absent_answers: dict[tuple[str, int], bytes] = {}
        # Connections callers' own event loops read their replies on, by token (REPLY_TO).
        self._reply_conns: dict[str, Link] = {}
        # Calls that came before their mesh's spawn did.
        self._early = EarlyCalls(loop, _EARLY_CALL_WAIT, self._handle_call)

    def handlers(self) -> dict[int, Handler]:
        """The handler of each frame kind this part answers, for the dispatch table."""

        def header_only(handle: Callable[[Link, tuple[Any, ...]], None]) -> Handler:
            return lambda conn, header, parts: handle(conn, header)

        return {
            hdr.CALL: self._handle_call,
            hdr.SPAWN: self._handle_spawn,
            hdr.STOP_MESH: header_only(self._handle_stop_mesh),
            hdr.CANCEL: header_only(self._handle_cancel),
            hdr.INSPECT: header_only(self._handle_inspect),
            hdr.OBSERVE: header_only(self._handle_observe),
            hdr.REPLY_TO: header_only(self._handle_reply_to),
        }

    def close_all(self) -> None:
        """Close every hosted actor's mailbox (the process is exiting)."""
        for actors in self.hosted.values():
            for hosted in actors.values():
                hosted.mailbox.close()
        self.hosted.clear()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.links.call_soon(fn, *args)

    def _mailbox(self, name: str) -> Mailbox:
        config = self.config
        RECORDER.configure(config.timeline_spans if config.observe else 0)
        if config.otel != "off":
            _otel.configure(config, "worker", self._queue_depths)
        return Mailbox(
            self.loop,
            name,
            stats=self.config.observe,
            new_loop=functools.partial(new_event_loop, self.config),
        )

    def _queue_depths(self) -> list[tuple[str, int, int]]:
        """Each hosted actor's queued messages (for ``actormesh.queue.depth``)."""
        return [
            (hosted.mesh_name, rank, len(hosted.mailbox.queued()))
            for by_rank in list(self.hosted.values())
            for rank, hosted in list(by_rank.items())
        ]

    def _handle_call(self, conn: Link, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        # Unpacked straight from the checked wire tuple, in ``hdr.Call``'s field order
        # (the most frequent frame with REPLY: no instance made; tests/unit/test_headers.py
        # holds the order).
        _, req_id, mesh_id, ranks, endpoint, token, port, view, trace = header
        reply_conn = self._reply_conns.get(token) if token is not None else None
        actors = self.hosted.get(mesh_id)
        if actors is None:
            if self._early.hold(mesh_id, (conn, header, parts)):
                return  # its spawn is still on its way (another sender's connection)
            actors = {}
        payload, buffers = parts[1], parts[2:]
        for rank in ranks:
            hosted = actors.get(rank)
            if hosted is None:
                self._reply_missing(conn, req_id, rank, mesh_id, endpoint)
                continue
            delivery = _Delivery(
                self, conn, req_id, rank, endpoint, payload, buffers, hosted, reply_conn, port,
                view, trace,
            )  # fmt: skip
            hosted.mailbox.deliver(delivery)

    def _handle_reply_to(self, conn: Link, header: tuple[Any, ...]) -> None:
        # A caller's loop will read replies here; it waits for this confirmation.
        reply_to = hdr.read(hdr.ReplyTo, header)
        self._reply_conns[reply_to.token] = conn
        with contextlib.suppress(TransportClosed):
            conn.send([hdr.encode(reply_to)])

    def forget_reply_conn(self, conn: Link) -> None:
        for token, known in list(self._reply_conns.items()):
            if known is conn:
                del self._reply_conns[token]

    def _reply_missing(
        self, conn: Link, req_id: int, rank: int, mesh_id: str, endpoint: str
    ) -> None:
        payload = self._absent_answers.get((mesh_id, rank))
        if payload is None:
            error = MeshStoppedError(
                f"actor mesh {mesh_id!r} has no live actor of rank {rank} here"
            )
            payload = error_payload(error, mesh=mesh_id, point={}, endpoint=endpoint)
        head = hdr.Reply(req_id, rank, False) if req_id else hdr.Failure(mesh_id, rank, endpoint)
        with contextlib.suppress(TransportClosed):
            conn.send([hdr.encode(head), payload])

    def _handle_spawn(self, conn: Link, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        req_id, mesh_id, ranks = hdr.read(hdr.Spawn, header)
        self._spawners[mesh_id] = conn
        actors = self.hosted.setdefault(mesh_id, {})
        spec = _SpawnSpec(mesh_id, parts)
        for rank in ranks:
            # Named after the mesh until the spec is loaded on the actor's thread: calls
            # that arrive meanwhile queue in its mailbox, as they do while __init__ runs.
            mailbox = self._mailbox(f"actor {spec.mesh_name}")
            hosted = actors[rank] = _HostedActor(mailbox, mesh_id, spec.mesh_name, {})

            def build(rank: int = rank, hosted: _HostedActor = hosted) -> Any:
                factory, hosted.mesh_name, hosted.point = spec.actor(rank)
                threading.current_thread().name = f"actor {hosted.mesh_name}{hosted.point}"
                return factory()

            def done(
                error: BaseException | None, rank: int = rank, hosted: _HostedActor = hosted
            ) -> None:
                if error is None:
                    reply = [hdr.encode(hdr.Reply(req_id, rank, True)), dumps(None)[0]]
                else:
                    actors.pop(rank, None)
                    payload = error_payload(
                        error,
                        mesh=hosted.mesh_name,
                        point=hosted.point,
                        endpoint="__init__",
                        init=True,
                    )
                    # Calls that come later get this error, not "no such actor".
                    self._absent_answers[(mesh_id, rank)] = payload
                    reply = [hdr.encode(hdr.Reply(req_id, rank, False)), payload]
                with contextlib.suppress(TransportClosed):
                    conn.send(reply)

            mailbox.construct(build, done)
        self._early.arrived(mesh_id)

    def _deliveries(
        self, conn: Link, mesh_id: str, ranks: Sequence[int], req_id: int
    ) -> list[tuple[int, _HostedActor | None, Callable[[Any], bool]]]:
        """For each rank: its hosted actor here, and a test for request ``req_id``'s message."""
        actors = self.hosted.get(mesh_id, {})

        def mine(message: Any) -> bool:
            return (
                getattr(message, "req_id", None) == req_id
                and getattr(message, "conn", None) is conn
            )

        return [(rank, actors.get(rank), mine) for rank in ranks]

    def _handle_cancel(self, conn: Link, header: tuple[Any, ...]) -> None:
        req_id, mesh_id, ranks = hdr.read(hdr.Cancel, header)
        for _rank, hosted, mine in self._deliveries(conn, mesh_id, ranks, req_id):
            if hosted is not None:
                hosted.mailbox.cancel(mine)

    def _handle_inspect(self, conn: Link, header: tuple[Any, ...]) -> None:
        req_id, mesh_id, ranks, call_id = hdr.read(hdr.Inspect, header)
        answers: dict[int, dict[str, Any]] = {}
        for rank, hosted, mine in self._deliveries(conn, mesh_id, ranks, call_id):
            if hosted is None:
                answers[rank] = {"state": "absent", "busy": None}
            else:
                answers[rank] = describe(hosted.mailbox, mine)
        reply = [hdr.encode(hdr.Reply(req_id, -1, True)), dumps(answers)[0]]
        with contextlib.suppress(TransportClosed):
            conn.send(reply)

    def _handle_observe(self, conn: Link, header: tuple[Any, ...]) -> None:
        req_id, what = hdr.read(hdr.Observe, header)
        actors = [
            (hosted.mesh_id, rank, hosted.mesh_name, hosted.point, hosted.mailbox)
            for by_rank in self.hosted.values()
            for rank, hosted in by_rank.items()
        ]
        _snapshot.reply(conn, req_id, _snapshot.answer(actors, what, paused()))

    def host(
        self,
        mesh_id: str,
        rank: int,
        factory: Callable[[], Any],
        mesh_name: str,
        point: dict[str, int],
        done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        """Host an actor in this process without a SPAWN message (join-style processes).

        ``factory`` builds the ``Hosted`` object on the actor's thread; callers anywhere
        then reach it with CALL frames naming ``mesh_id`` and ``rank``.
        """

        def install() -> None:
            mailbox = self._mailbox(f"actor {mesh_name}{point}")
            self.hosted.setdefault(mesh_id, {})[rank] = _HostedActor(
                mailbox, mesh_id, mesh_name, point
            )
            mailbox.construct(factory, done or (lambda error: None))

        self.call_soon(install)

    def deliver_local(self, mesh_id: str, rank: int, message: Any) -> bool:
        """Queue ``message`` for an actor hosted here (loop thread); False if none."""
        hosted = self.hosted.get(mesh_id, {}).get(rank)
        if hosted is None:
            return False
        hosted.mailbox.deliver(message)
        return True

    def drop_actor(self, mesh_id: str, rank: int, error: BaseException) -> None:
        """Drop one actor hosted here after a failure that ends it (any thread): queued
        messages fail, and its ``__cleanup__`` gets ``error``."""
        self.call_soon(self._drop_actor, mesh_id, rank, error)

    def _drop_actor(self, mesh_id: str, rank: int, error: BaseException) -> None:
        hosted = self.hosted.get(mesh_id, {}).pop(rank, None)
        if hosted is not None:
            # A dropped actor is gone as a dead one is: later calls fail with its death.
            point = "{" + ", ".join(f"{k}={v}" for k, v in hosted.point.items()) + "}"
            gone = ActorDiedError(
                f"The actor {hosted.mesh_name}{point} and all its descendants have failed "
                f"(actor {point} of mesh '{hosted.mesh_name}' was dropped after it failed: "
                f"{type(error).__name__}: {error})",
                reason=f"dropped: {error}",
                ranks=(rank,),
            )
            self._absent_answers[(mesh_id, rank)] = error_payload(
                gone, mesh=hosted.mesh_name, point=hosted.point, endpoint="", as_sent=True
            )
            # Calls that came before the drop and wait in its queue fail the same way.
            hosted.mailbox.close(None, error, gone)

    def escalate(self, mesh_id: str, rank: int, endpoint: str, payload: bytes) -> bool:
        """Report a failure of actor ``rank`` of ``mesh_id`` to whoever spawned that mesh.

        It arrives there as a FAILURE frame, like a failed ``broadcast``. False when this
        process does not know the spawner (the actor was hosted by ``host()``) or it is gone.
        """
        conn = self._spawners.get(mesh_id)
        if conn is None or conn.closed:
            return False
        try:
            conn.send([hdr.encode(hdr.Failure(mesh_id, rank, endpoint)), payload])
        except TransportClosed:
            return False
        return True

    def _handle_stop_mesh(self, conn: Link, header: tuple[Any, ...]) -> None:
        req_id, mesh_id = hdr.read(hdr.StopMesh, header)
        self._spawners.pop(mesh_id, None)
        self._early.ended(mesh_id)
        for key in [key for key in self._absent_answers if key[0] == mesh_id]:
            del self._absent_answers[key]
        actors = list(self.hosted.pop(mesh_id, {}).values())
        replied = False

        def reply() -> None:
            nonlocal replied
            if replied or not req_id:
                return
            replied = True
            with contextlib.suppress(TransportClosed):
                conn.send([hdr.encode(hdr.Reply(req_id, -1, True)), dumps(None)[0]])

        # Answer once every actor's close hooks have run (a process group torn down, say),
        # but never wait long for an actor stuck in a long `def` endpoint.
        remaining = len(actors)

        def closed() -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                reply()

        for hosted in actors:
            hosted.mailbox.close(closed)
        if not actors:
            reply()
        else:
            self.loop.call_later(_STOP_REPLY_GRACE, reply)
