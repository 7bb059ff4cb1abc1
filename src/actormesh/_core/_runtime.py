"""The per-process runtime: event loop, connections, requests, hosted actors, workers.

One ``Runtime`` per process. In the controller it runs its event loop on a daemon thread
("actormesh-io") so sync code can block on results while I/O goes on; in a worker the loop
is the main thread's. Everything that touches sockets runs on that loop, except sending,
which any thread may do directly (see ``Connection.send``).

Requests: ``register(handler)`` gives a request id; frames are sent to one or more
processes; replies come back on the connection the request went out on and are handed to
the handler on the loop thread. When a connection dies, every pending handler hears of it
(``on_lost``) and decides which of its ranks that fails, so no wait outlives its peer.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, ClassVar, Protocol, TypeVar

from .._config import Config
from .._exceptions import ActorDiedError, MeshStoppedError
from .._transport import (
    Connection,
    Listener,
    TcpListener,
    TransportClosed,
    connect_address,
    format_tcp,
    is_tcp,
    new_secret,
    parse_tcp,
    private_socket_dir,
)
from .._transport._frames import Buffer
from . import _envelope as env
from ._deferral import Deferrals, Resume
from ._heartbeat import HeartbeatMonitor
from ._inspect import describe
from ._limits import check_message_size
from ._mailbox import Mailbox
from ._output import PipeForwarder
from ._process import ChildProcess, describe_exit, launch
from ._reaper import kill_tagged
from ._remote import Joined, Joins, RemoteProcess, route_source
from ._serialization import dumps, loads

__all__ = ["ReplyHandler", "Runtime", "new_event_loop"]

log = logging.getLogger("actormesh.runtime")
T = TypeVar("T")


class ReplyHandler(Protocol):
    """Receives the replies of one request; both methods run on the loop thread."""

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        """One rank answered (``ok`` False: parts[0] is an error payload). True when done."""
        ...

    def on_lost(self, conn: Connection, reason: str) -> bool:
        """``conn`` died; fail the ranks that were waiting on it. True when done."""
        ...


def new_event_loop(config: Config) -> asyncio.AbstractEventLoop:
    """A new loop of the configured kind (uvloop when asked for and installed)."""
    if config.event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


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
    """One call to one hosted actor, and the way back to its caller."""

    __slots__ = (
        "buffers",
        "cancelled",
        "conn",
        "endpoint",
        "mesh_id",
        "mesh_name",
        "payload",
        "point",
        "rank",
        "req_id",
    )

    # The largest reply this process may send (Config.max_message_bytes, set by Runtime).
    max_bytes: ClassVar[int] = 1 << 40

    def __init__(
        self,
        conn: Connection,
        req_id: int,
        rank: int,
        endpoint: str,
        payload: memoryview,
        buffers: list[memoryview],
        hosted: _HostedActor,
    ) -> None:
        self.conn = conn
        self.req_id = req_id
        self.rank = rank
        self.endpoint = endpoint
        self.payload = payload
        self.buffers = buffers
        self.mesh_id = hosted.mesh_id
        self.mesh_name = hosted.mesh_name
        self.point = hosted.point
        self.cancelled = False

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs = loads(self.payload, self.buffers)
        return args, kwargs

    def succeed(self, value: Any) -> None:
        if self.req_id == 0:
            return
        try:
            payload, buffers = dumps(value)
            if len(payload) > self.max_bytes or buffers:
                what = f"the value returned by endpoint '{self.endpoint}'"
                check_message_size([payload, *buffers], self.max_bytes, what)
        except Exception as error:
            self.fail(error)
            return
        header = env.encode_header((env.REPLY, self.req_id, self.rank, True))
        with contextlib.suppress(TransportClosed):
            self.conn.send([header, payload, *buffers])

    def fail(self, error: BaseException) -> None:
        payload = env.error_payload(
            error, mesh=self.mesh_name, point=self.point, endpoint=self.endpoint
        )
        if self.req_id == 0:
            header = env.encode_header((env.FAILURE, self.mesh_id, self.rank, self.endpoint))
        else:
            header = env.encode_header((env.REPLY, self.req_id, self.rank, False))
        with contextlib.suppress(TransportClosed):
            self.conn.send([header, payload])


class Runtime:
    """This process' runtime; see the module docstring."""

    _current: ClassVar[Runtime | None] = None
    _current_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop, key: str) -> None:
        self.config = config
        _Delivery.max_bytes = config.max_message_bytes
        self.loop = loop
        self.key = key
        # Workers started here share their owner's directory; others make their own.
        self._own_socket_dir = not os.environ.get("ACTORMESH_SOCKET_DIR")
        self.socket_dir = os.environ.get("ACTORMESH_SOCKET_DIR") or private_socket_dir(
            config.socket_dir
        )
        self.listen_path = os.path.join(self.socket_dir, f"{key}.sock")
        self.loop_thread_id: int | None = None
        self.closed = False
        self._listener: Listener | None = None
        self._conns: dict[str, Connection] = {}
        self._conns_lock = threading.Lock()
        self._dead_paths: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._pending: dict[int, ReplyHandler] = {}
        self._hosted: dict[str, dict[int, _HostedActor]] = {}
        self._spawners: dict[str, Connection] = {}  # mesh id -> who spawned it here
        self._children: dict[str, ChildProcess] = {}
        self._child_conns: dict[Connection, ChildProcess] = {}
        self._forwarders: dict[str, list[PipeForwarder]] = {}
        self._hello: dict[str, asyncio.Future[None]] = {}
        self._parent: Connection | None = None
        self._heartbeat: HeartbeatMonitor | None = None
        self.exit_listeners: list[Callable[[ChildProcess, str], None]] = []
        # Asked first when a worker dies: True when it will be restarted at the same path
        # (then calls to it wait for the new process, see relaunching / when_back).
        self.relaunch_policy: Callable[[ChildProcess], bool] | None = None
        self._deferrals = Deferrals()
        self.failure_handler: Callable[[str, int, str, memoryview], None] | None = None
        # The job's secret: TCP peers prove it (workers started here inherit it).
        self.secret = config.secret or new_secret()
        # What this process tells peers to connect to: its Unix socket, or its TCP
        # address when its owner is on another host (see listen_tcp).
        self.address = self.listen_path
        self._tcp_listeners: dict[tuple[str, int], TcpListener] = {}
        self.joins = Joins()  # who waits for processes that dial in over TCP

    # -- construction -------------------------------------------------------------------

    @classmethod
    def get(cls) -> Runtime:
        """This process' runtime, starting a controller runtime on first use."""
        runtime = cls._current
        if runtime is not None and not runtime.closed:
            return runtime
        with cls._current_lock:
            runtime = cls._current
            if runtime is None or runtime.closed:
                runtime = cls._current = cls._start_controller(Config.from_env())
        return runtime

    @classmethod
    def current(cls) -> Runtime | None:
        """The runtime if one is running here, without starting one."""
        runtime = cls._current
        return runtime if runtime is not None and not runtime.closed else None

    @classmethod
    def _start_controller(cls, config: Config) -> Runtime:
        loop = new_event_loop(config)
        runtime = cls(config, loop, key=f"ctl{os.getpid()}-{time.monotonic_ns() % 10**9}")
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            runtime.loop_thread_id = threading.get_ident()
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=main, name="actormesh-io", daemon=True)
        thread.start()
        started.wait()
        runtime.run_sync(runtime._listen())
        atexit.register(runtime.shutdown)
        return runtime

    @classmethod
    def start_worker(
        cls,
        config: Config,
        loop: asyncio.AbstractEventLoop,
        key: str,
        parent_path: str,
        info: dict[str, Any] | None = None,
    ) -> Runtime:
        """Create the runtime of a worker on the calling thread's ``loop`` (not yet run).

        An owner at a ``tcp://`` address is on another host (or lets processes join): the
        worker then listens on TCP too, on ``Config.listen_host`` or else the interface
        that reaches the owner, and introduces itself by that address. ``info`` travels
        in the HELLO (a joining process says who it is).
        """
        runtime = cls(config, loop, key=key)
        runtime.loop_thread_id = threading.get_ident()
        cls._current = runtime
        loop.run_until_complete(runtime._listen())
        if is_tcp(parent_path):
            here = route_source(parent_path)
            address = runtime.listen_tcp(config.listen_host or here)
            if parse_tcp(address)[0] in ("0.0.0.0", "::"):
                # Listening everywhere: peers reach us where our owner does.
                address = format_tcp(here, parse_tcp(address)[1])
            runtime.address = address
        runtime._parent = runtime.connection(parent_path)
        hello = (env.HELLO, runtime.address, os.getpid(), key, info or {})
        runtime._parent.send([env.encode_header(hello)])
        return runtime

    async def _listen(self) -> None:
        self._listener = Listener(self.listen_path, self.loop, self._accepted)
        self._listener.start()

    def _accepted(self, sock: Any) -> None:
        conn = self._new_connection(sock, peer="incoming")
        conn.start()

    def _new_connection(self, sock: Any, peer: str, *, same_host: bool = True) -> Connection:
        # Shared memory only between processes of one host: across TCP, buffers travel
        # as raw bytes after the frame header.
        return Connection(
            sock,
            self.loop,
            self._on_frame,
            self._on_close,
            max_frame_bytes=self.config.max_message_bytes,
            shm_threshold=self.config.shm_threshold if same_host else 0,
            peer=peer,
        )

    def listen_tcp(self, host: str | None = None, port: int = 0) -> str:
        """Also accept TCP connections from peers with the job's secret; their address.

        ``host`` defaults to ``Config.listen_host``, else loopback; port 0 picks a free
        one. Asking again for a host already listened on returns the same address.
        """
        host = host or self.config.listen_host or "127.0.0.1"
        with self._conns_lock:
            for (bound_host, bound_port), listener in self._tcp_listeners.items():
                if bound_host == host and port in (0, bound_port):
                    return listener.address
            listener = TcpListener(host, port, secret=self.secret, on_accept=self._tcp_accepted)
            self._tcp_listeners[(host, listener.port)] = listener
        listener.start()
        return listener.address

    def use_secret(self, secret: str) -> None:
        """Make ``secret`` the job's secret (before any worker or listener has another).

        Raises:
            ValueError: workers or TCP listeners of this process already use another one.
        """
        if secret == self.secret:
            return
        if self._tcp_listeners or self._children:
            raise ValueError(
                "this process already uses another job secret (its workers or listeners "
                "have it); set ACTORMESH_SECRET before the first mesh instead"
            )
        self.secret = secret

    def _tcp_accepted(self, sock: Any) -> None:
        # On a listener thread, with the peer authenticated: reading starts on the loop.
        def start() -> None:
            if self.closed:
                sock.close()
                return
            self._new_connection(sock, peer="incoming tcp", same_host=False).start()

        try:
            self.loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop is closed: this process is on its way out
            sock.close()

    def _close_tcp_listeners(self) -> None:
        for listener in list(self._tcp_listeners.values()):
            listener.close()

    # -- threads ------------------------------------------------------------------------

    def in_loop_thread(self) -> bool:
        """True on the thread that runs this runtime's event loop."""
        return threading.get_ident() == self.loop_thread_id

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread (now if already there)."""
        if self.in_loop_thread():
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def submit(self, coro: Coroutine[Any, Any, T]) -> ConcurrentFuture[T]:
        """Run a coroutine on the loop from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for it (not from the loop thread)."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("run_sync called on the runtime's event-loop thread")
        return self.submit(coro).result(timeout)

    # -- connections --------------------------------------------------------------------

    def connection(self, path: str) -> Connection:
        """The connection to the process listening at ``path``, opened on first use.

        Raises:
            ActorDiedError: the process is known dead or cannot be reached.
        """
        conn = self._conns.get(path)
        if conn is not None and not conn.closed:
            return conn
        tcp = is_tcp(path)
        with self._conns_lock:
            conn = self._conns.get(path)
            if conn is not None and not conn.closed:
                return conn
            if self.closed:
                raise MeshStoppedError("the actormesh runtime of this process has shut down")
            dead = self._dead_paths.get(path)
            if dead is not None:
                raise ActorDiedError(f"the process is dead: {dead}", reason=dead)
            if not tcp:
                conn = self._new_connection(self._dial(path), peer=path)
                self._conns[path] = conn
        if tcp:
            # Another host: connecting and the handshake may take a while, so not under
            # the lock (the loop thread takes it too, and must never wait on a far host).
            sock = self._dial(path)
            with self._conns_lock:
                conn = self._conns.get(path)
                if conn is not None and not conn.closed:
                    sock.close()  # another thread connected meanwhile: use its connection
                    return conn
                conn = self._new_connection(sock, peer=path, same_host=False)
                self._conns[path] = conn
        assert conn is not None
        self.call_soon(conn.start)
        return conn

    def _dial(self, path: str) -> Any:
        try:
            return connect_address(path, secret=self.secret)
        except OSError as error:
            reason = f"cannot reach the process at {path}: {error.strerror or error}"
            raise ActorDiedError(reason, reason=reason) from None

    # -- requests -----------------------------------------------------------------------

    def register(self, handler: ReplyHandler) -> int:
        """A new request id whose replies go to ``handler``."""
        req_id = next(self._ids)
        self._pending[req_id] = handler
        return req_id

    def forget(self, req_id: int) -> None:
        """Stop listening for a request (late replies are then dropped)."""
        self._pending.pop(req_id, None)

    def send(self, conn: Connection, header: tuple[Any, ...], parts: Sequence[Buffer]) -> None:
        """Send one frame; raises ``ActorDiedError`` when the connection is gone."""
        try:
            conn.send([env.encode_header(header), *parts])
        except TransportClosed as error:
            raise ActorDiedError(str(error), reason=str(error)) from None

    # -- incoming frames ----------------------------------------------------------------

    def _on_frame(self, conn: Connection, parts: list[memoryview]) -> None:
        try:
            header = env.decode_header(parts[0])
            kind = header[0]
            if kind == env.REPLY:
                _, req_id, rank, ok = header
                handler = self._pending.get(req_id)
                if handler is not None and handler.on_reply(rank, ok, parts[1:]):
                    self._pending.pop(req_id, None)
            elif kind == env.CALL:
                self._handle_call(conn, header, parts)
            elif kind == env.SPAWN:
                self._handle_spawn(conn, header, parts)
            elif kind == env.FAILURE:
                _, mesh_id, rank, endpoint = header
                if self.failure_handler is not None:
                    self.failure_handler(mesh_id, rank, endpoint, parts[1])
            elif kind == env.HELLO:
                self._handle_hello(conn, header)
            elif kind == env.STOP_MESH:
                self._handle_stop_mesh(conn, header)
            elif kind == env.SHUTDOWN:
                self._exit_worker("asked to shut down")
            elif kind == env.PING:
                # Answered here, on the loop, so a busy actor thread cannot delay it.
                conn.send([env.encode_header((env.PONG, header[1]))])
            elif kind == env.PONG:
                if self._heartbeat is not None:
                    self._heartbeat.answered(conn.peer)
            elif kind == env.CANCEL:
                self._handle_cancel(conn, header)
            elif kind == env.INSPECT:
                self._handle_inspect(conn, header)
            else:
                log.warning("dropping a frame of unknown kind %r", kind)
        except Exception:
            log.exception("failed to handle a frame from %s", conn.peer)

    def _handle_call(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        _, req_id, mesh_id, ranks, endpoint = header
        actors = self._hosted.get(mesh_id, {})
        payload, buffers = parts[1], parts[2:]
        for rank in ranks:
            hosted = actors.get(rank)
            if hosted is None:
                self._reply_missing(conn, req_id, rank, mesh_id, endpoint)
                continue
            hosted.mailbox.deliver(
                _Delivery(conn, req_id, rank, endpoint, payload, buffers, hosted)
            )

    def _reply_missing(
        self, conn: Connection, req_id: int, rank: int, mesh_id: str, endpoint: str
    ) -> None:
        error = MeshStoppedError(f"actor mesh {mesh_id!r} has no live actor of rank {rank} here")
        payload = env.error_payload(error, mesh=mesh_id, point={}, endpoint=endpoint)
        head = (
            (env.REPLY, req_id, rank, False) if req_id else (env.FAILURE, mesh_id, rank, endpoint)
        )
        with contextlib.suppress(TransportClosed):
            conn.send([env.encode_header(head), payload])

    def _handle_spawn(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        _, req_id, mesh_id, ranks = header
        try:
            spec = loads(parts[1], parts[2:])
        except Exception as error:
            self._refuse_spawn(conn, req_id, mesh_id, ranks, error)
            return
        self._spawners[mesh_id] = conn
        actors = self._hosted.setdefault(mesh_id, {})
        for rank in ranks:
            factory, mesh_name, point = spec.actor(rank)
            mailbox = Mailbox(self.loop, name=f"actor {mesh_name}{point}")
            actors[rank] = _HostedActor(mailbox, mesh_id, mesh_name, point)

            def done(
                error: BaseException | None,
                rank: int = rank,
                name: str = mesh_name,
                point: dict[str, int] = point,
            ) -> None:
                if error is None:
                    reply = [env.encode_header((env.REPLY, req_id, rank, True)), dumps(None)[0]]
                else:
                    actors.pop(rank, None)
                    payload = env.error_payload(
                        error, mesh=name, point=point, endpoint="__init__", init=True
                    )
                    reply = [env.encode_header((env.REPLY, req_id, rank, False)), payload]
                with contextlib.suppress(TransportClosed):
                    conn.send(reply)

            mailbox.construct(factory, done)

    def _deliveries(
        self, conn: Connection, mesh_id: str, ranks: Sequence[int], req_id: int
    ) -> list[tuple[int, _HostedActor | None, Callable[[Any], bool]]]:
        """For each rank: its hosted actor here, and a test for request ``req_id``'s message."""
        actors = self._hosted.get(mesh_id, {})

        def mine(message: Any) -> bool:
            return (
                getattr(message, "req_id", None) == req_id
                and getattr(message, "conn", None) is conn
            )

        return [(rank, actors.get(rank), mine) for rank in ranks]

    def _handle_cancel(self, conn: Connection, header: tuple[Any, ...]) -> None:
        _, req_id, mesh_id, ranks = header
        for _rank, hosted, mine in self._deliveries(conn, mesh_id, ranks, req_id):
            if hosted is not None:
                hosted.mailbox.cancel(mine)

    def _handle_inspect(self, conn: Connection, header: tuple[Any, ...]) -> None:
        _, req_id, mesh_id, ranks, call_id = header
        answers: dict[int, dict[str, Any]] = {}
        for rank, hosted, mine in self._deliveries(conn, mesh_id, ranks, call_id):
            if hosted is None:
                answers[rank] = {"state": "absent", "busy": None}
            else:
                answers[rank] = describe(hosted.mailbox, mine)
        reply = [env.encode_header((env.REPLY, req_id, -1, True)), dumps(answers)[0]]
        with contextlib.suppress(TransportClosed):
            conn.send(reply)

    def _refuse_spawn(
        self,
        conn: Connection,
        req_id: int,
        mesh_id: str,
        ranks: Sequence[int],
        error: BaseException,
    ) -> None:
        # The actor class (or an argument) cannot be loaded here: every rank fails its
        # construction, with the import error and this interpreter's path to explain it.
        problem = RuntimeError(
            f"the worker (pid {os.getpid()}) cannot load what the spawn of mesh {mesh_id!r} "
            f"needs, the actor class or its arguments: {type(error).__name__}: {error} "
            f"(is its module importable by workers? their sys.path: {sys.path})"
        )
        problem.__cause__ = error
        name = mesh_id.rsplit("-", 1)[0]
        for rank in ranks:
            payload = env.error_payload(
                problem, mesh=name, point={}, endpoint="__init__", init=True
            )
            with contextlib.suppress(TransportClosed):
                conn.send([env.encode_header((env.REPLY, req_id, rank, False)), payload])

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
            mailbox = Mailbox(self.loop, name=f"actor {mesh_name}{point}")
            self._hosted.setdefault(mesh_id, {})[rank] = _HostedActor(
                mailbox, mesh_id, mesh_name, point
            )
            mailbox.construct(factory, done or (lambda error: None))

        self.call_soon(install)

    def deliver_local(self, mesh_id: str, rank: int, message: Any) -> bool:
        """Queue ``message`` for an actor hosted here (loop thread); False if none."""
        hosted = self._hosted.get(mesh_id, {}).get(rank)
        if hosted is None:
            return False
        hosted.mailbox.deliver(message)
        return True

    def escalate(self, mesh_id: str, rank: int, endpoint: str, payload: bytes) -> bool:
        """Report a failure of actor ``rank`` of ``mesh_id`` to whoever spawned that mesh.

        It arrives there as a FAILURE frame, like a failed ``broadcast``. False when this
        process does not know the spawner (the actor was hosted by ``host()``) or it is gone.
        """
        conn = self._spawners.get(mesh_id)
        if conn is None or conn.closed:
            return False
        try:
            conn.send([env.encode_header((env.FAILURE, mesh_id, rank, endpoint)), payload])
        except TransportClosed:
            return False
        return True

    def _handle_stop_mesh(self, conn: Connection, header: tuple[Any, ...]) -> None:
        _, req_id, mesh_id = header
        self._spawners.pop(mesh_id, None)
        for hosted in self._hosted.pop(mesh_id, {}).values():
            hosted.mailbox.close()
        if req_id:
            with contextlib.suppress(TransportClosed):
                conn.send([env.encode_header((env.REPLY, req_id, -1, True)), dumps(None)[0]])

    # -- connection loss ----------------------------------------------------------------

    def _on_close(self, conn: Connection, error: BaseException | None) -> None:
        with self._conns_lock:
            for path, known in list(self._conns.items()):
                if known is conn:
                    del self._conns[path]
        if conn is self._parent:
            self._exit_worker("the owner went away")
            return
        child = self._child_conns.get(conn)
        if isinstance(child, RemoteProcess):
            child.connection_lost()  # no exit status crosses hosts: this is its death
            return
        if child is not None and child.alive():
            # The process is exiting: wait for its exit status so the error can say how
            # it died; if it somehow lives on, fail its calls after a short grace anyway.
            self.loop.call_later(1.0, self._fail_if_still_pending, conn, child)
            return
        if child is None:
            detail = f": {error}" if error else ""
            self._fail_connection(conn, f"the connection to {conn.peer} was lost{detail}")

    def _fail_if_still_pending(self, conn: Connection, child: ChildProcess) -> None:
        if child.alive():
            self._fail_connection(conn, f"process {child.pid} closed its connection")

    def _fail_connection(self, conn: Connection, reason: str) -> None:
        for req_id, handler in list(self._pending.items()):
            try:
                if handler.on_lost(conn, reason):
                    self._pending.pop(req_id, None)
            except Exception:
                log.exception("a reply handler failed while its connection died")

    # -- worker processes (owner side) --------------------------------------------------

    async def start_processes(
        self, specs: Sequence[tuple[str, int, dict[str, str]]]
    ) -> list[ChildProcess]:
        """Start one worker per ``(key, rank, env)`` and wait until each has joined.

        On failure (a worker dies early, or the spawn timeout passes) every process started
        here is killed before the error propagates.
        """
        children: list[ChildProcess] = []
        output = self.config.output
        try:
            for key, rank, extra_env in specs:
                path = os.path.join(self.socket_dir, f"{key}.sock")
                process_env = {
                    **extra_env,
                    "ACTORMESH_KEY": key,
                    "ACTORMESH_PARENT": self.listen_path,
                    "ACTORMESH_PARENT_PID": str(os.getpid()),
                    "ACTORMESH_SOCKET_DIR": self.socket_dir,
                    "ACTORMESH_OUTPUT": output,
                    "ACTORMESH_SECRET": self.secret,
                }
                self._hello[path] = self.loop.create_future()
                child = launch(key=key, rank=rank, listen_path=path, env=process_env, output=output)
                children.append(child)
                self._children[path] = child
                if output == "prefix":
                    forwarders = [
                        PipeForwarder(self.loop, child.popen.stdout, "stdout"),
                        PipeForwarder(self.loop, child.popen.stderr, "stderr"),
                    ]
                    for forwarder in forwarders:
                        forwarder.start()
                    self._forwarders[path] = forwarders
                child.watch(self.loop, self._child_exited)
            waits = [self._hello[c.listen_path] for c in children]
            await asyncio.wait_for(asyncio.gather(*waits), self.config.spawn_timeout)
        except BaseException:
            await self.stop_processes(children, grace=0.0)
            raise
        finally:
            for child in children:
                self._hello.pop(child.listen_path, None)
        return children

    def _handle_hello(self, conn: Connection, header: tuple[Any, ...]) -> None:
        _, path, pid, key, *info = header
        child = self._children.get(path)
        if child is None and is_tcp(path):
            # A process this one did not start dialled in: whoever waits for it adopts it.
            self.joins.offer(Joined(conn, path, pid, key, info[0] if info else {}))
            return
        with self._conns_lock:
            self._conns[path] = conn
        conn.peer = path
        if child is not None:
            self._child_conns[conn] = child
            self._monitor().track(child)
        waiter = self._hello.get(path)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def adopt(
        self, joined: Joined, rank: int, kill: Callable[[], None] | None = None
    ) -> RemoteProcess:
        """Own a process that joined over TCP, as ``rank`` (loop thread).

        From now on it is one of this runtime's workers: probed by heartbeats, stopped by
        ``stop_processes``, and its death (its connection closing) reported like a local
        worker's exit. ``kill`` is how to end it for sure (see ``RemoteProcess``).
        """
        child = RemoteProcess(joined, rank, kill)
        path = joined.address
        self._children[path] = child
        self._dead_paths.pop(path, None)
        with self._conns_lock:
            self._conns[path] = joined.conn
        joined.conn.peer = path
        self._child_conns[joined.conn] = child
        child.watch(self.loop, self._child_exited)
        if child.alive():
            self._monitor().track(child)
        return child

    def _monitor(self) -> HeartbeatMonitor:
        if self._heartbeat is None:
            self._heartbeat = HeartbeatMonitor(
                self.loop,
                interval=self.config.heartbeat_interval,
                timeout=self.config.heartbeat_timeout,
                probe=self._probe,
                declare_dead=self._declare_dead,
            )
        return self._heartbeat

    def _probe(self, child: ChildProcess, seq: int) -> bool:
        conn = self._conns.get(child.listen_path)
        if conn is None or conn.closed:
            return False
        try:
            conn.send([env.encode_header((env.PING, seq))])
        except TransportClosed:
            return False
        return True

    def _declare_dead(self, child: ChildProcess, note: str) -> None:
        # Killing it turns silence into an ordinary death: the pidfd fires and
        # _child_exited reports it once, with this note as the cause.
        log.warning("worker %s (rank %s) %s", child.pid, child.rank, note)
        child.death_note = note
        child.signal_group(signal.SIGKILL)

    def _child_exited(self, child: ChildProcess) -> None:
        path = child.listen_path
        if not child.stopping and self.relaunch_policy is not None and self.relaunch_policy(child):
            self._deferrals.begin(path)
        how = child.death_note or describe_exit(child.returncode)
        reason = f"process {child.pid} (rank {child.rank}) {how}"
        if child.restart_note:
            reason += f"; {child.restart_note}"
        if self._heartbeat is not None:
            self._heartbeat.untrack(child)
        self._dead_paths[path] = reason
        for forwarder in self._forwarders.pop(path, []):
            forwarder.drain()
        waiter = self._hello.get(path)
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                ActorDiedError(f"worker {reason} before joining its mesh", reason=reason)
            )
        conn = self._conns.get(path)
        for known, owned in list(self._child_conns.items()):
            if owned is child:
                conn = known
                del self._child_conns[known]
        if conn is not None:
            self._fail_connection(conn, reason)
            conn.close()
        # Whatever the worker started dies with it: no orphans. Its process group covers
        # what its actors started. A worker that exited cleanly killed its descendants
        # itself; after a crash, the environment tag finds the ones that left the group.
        child.signal_group(signal.SIGKILL)
        if child.returncode != 0:
            kill_tagged("ACTORMESH_KEY", child.key)
        if child.stopping:
            return  # the owner asked for this exit: nothing to report
        for listener in list(self.exit_listeners):
            try:
                listener(child, reason)
            except Exception:
                log.exception("a process-exit listener failed")

    # -- restarts (owner side) -----------------------------------------------------------

    def relaunching(self, path: str) -> bool:
        """True while the process at ``path`` is being restarted (any thread)."""
        return self._deferrals.active(path)

    def when_back(self, path: str, resume: Resume) -> bool:
        """Run ``resume`` (loop thread) once ``path`` is restarted or its restart failed.

        Returns False, holding nothing, when no restart of ``path`` is under way.
        """
        return self._deferrals.defer(path, resume)

    async def relaunch(self, child: ChildProcess) -> ChildProcess:
        """Start a process in the place of the dead ``child``: same rank, same socket path.

        Keeping the path keeps every mesh reference to it valid; callers that had a
        connection to the old process find the new one on their next connect.
        """
        with contextlib.suppress(FileNotFoundError):
            os.unlink(child.listen_path)  # the dead process could not remove its socket
        env = {**child.env, "ACTORMESH_RESTARTS": str(child.restarts + 1)}
        (new,) = await self.start_processes([(child.key, child.rank, env)])
        new.restarts = child.restarts + 1
        return new

    def end_relaunch(self, path: str, error: BaseException | None) -> None:
        """The restart of ``path`` is over (loop thread): release or fail the held sends."""
        if error is None:
            self._dead_paths.pop(path, None)
        self._deferrals.end(path, error)

    async def stop_processes(self, children: Sequence[ChildProcess], grace: float) -> None:
        """Ask workers to exit, then SIGTERM, then SIGKILL their process groups."""
        for child in children:
            child.stopping = True
            if self._heartbeat is not None:
                self._heartbeat.untrack(child)
        for child in children:
            conn = self._conns.get(child.listen_path)
            if conn is not None and child.alive():
                with contextlib.suppress(TransportClosed):
                    conn.send([env.encode_header((env.SHUTDOWN,))])
        for sig, wait in ((None, grace), (signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
            alive = [c for c in children if c.alive()]
            if not alive:
                break
            if sig is not None:
                for child in alive:
                    child.signal_group(sig)
            deadline = self.loop.time() + wait
            while any(c.alive() for c in alive) and self.loop.time() < deadline:
                await asyncio.sleep(0.01)
        for child in children:
            child.signal_group(signal.SIGKILL)
            self._children.pop(child.listen_path, None)

    def children(self) -> list[ChildProcess]:
        """Worker processes started by this runtime that have not been stopped."""
        return list(self._children.values())

    # -- shutdown -----------------------------------------------------------------------

    def _exit_worker(self, why: str) -> None:
        if self.closed:
            return
        log.debug("worker %s exiting: %s", self.key, why)
        self.closed = True
        for actors in self._hosted.values():
            for hosted in actors.values():
                hosted.mailbox.close()
        self._hosted.clear()
        if self._listener is not None:
            self._listener.close()
        self._close_tcp_listeners()
        if self._own_socket_dir:  # a worker on another host, say: nobody else removes it
            with contextlib.suppress(OSError):
                os.rmdir(self.socket_dir)
        self.loop.stop()

    def shutdown(self) -> None:
        """Stop every worker this process started and close the runtime (controller)."""
        if self.closed:
            return
        children = list(self._children.values())
        if children and not self.in_loop_thread() and self.loop.is_running():
            try:
                self.run_sync(self.stop_processes(children, grace=1.0), timeout=15)
            except Exception:
                log.exception("stopping worker processes failed")
        for child in children:
            child.signal_group(signal.SIGKILL)
        self.closed = True
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self._close_listener)

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._close_tcp_listeners()
        with contextlib.suppress(OSError):
            os.rmdir(self.socket_dir)
