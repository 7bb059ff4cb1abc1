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
import errno
import itertools
import logging
import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, ClassVar, Protocol, TypeVar

from .._config import Config
from .._exceptions import ActorDiedError, MeshStoppedError
from .._transport import (
    Buffer,
    CloseHandler,
    Connection,
    Limits,
    Listener,
    SegmentShare,
    TcpListener,
    TransportClosed,
    connect_address,
    dual_address,
    format_tcp,
    is_abstract,
    is_tcp,
    new_secret,
    parse_tcp,
    private_socket_dir,
    route,
    route_source,
    tcp_part,
)
from . import _headers as hdr
from ._dispatch import Handler, Table, dispatch, frame_table
from ._event_loops import new_event_loop
from ._hosting import Hosting
from ._owner import NO_PROCESSES, ProcessOwner
from ._reply_routes import ReplyRoute, ReplyRoutes

__all__ = ["CoreRuntime", "FrameKindHandler", "ReplyHandler", "new_event_loop"]

log = logging.getLogger("actormesh.runtime")
T = TypeVar("T")
FrameKindHandler = Callable[[Connection, tuple[Any, ...], list[memoryview]], None]
R = TypeVar("R", bound="CoreRuntime")


class ReplyHandler(Protocol):
    """Receives the replies of one request; both methods run on the loop thread."""

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        """One rank answered (``ok`` False: parts[0] is an error payload). True when done."""
        ...

    def on_lost(self, conn: Connection, reason: str) -> bool:
        """``conn`` died; fail the ranks that were waiting on it. True when done."""
        ...


def _local_only(host: str) -> bool:
    # Loopback reaches no other host; a wildcard names no interface to advertise.
    return host.startswith("127.") or host in ("::1", "localhost", "0.0.0.0", "::")


class CoreRuntime:
    """This process' runtime, without the processes it owns; see the module docstring.

    The runtime every process uses is ``actormesh._hosts.Runtime``: this one with the
    parts of layer 3 plugged in. What owning processes means (a worker's HELLO, a
    heartbeat's answer, a worker's connection closing, shutting the workers down) it asks
    of ``owner``, a ``ProcessOwner`` part (``_owner``); none by default.
    """

    _current: ClassVar[CoreRuntime | None] = None
    _current_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop, key: str) -> None:
        self.config = config
        self.owner_pid = os.getpid()
        # The pid of a child this object was copied into by a fork (see _forget_after_fork).
        self.inherited_by: int | None = None
        self.loop = loop
        self.key = key
        # Workers started here share their owner's directory; others make their own.
        self._own_socket_dir = not os.environ.get("ACTORMESH_OWNER_SOCKET_DIR")
        self.socket_dir = os.environ.get("ACTORMESH_OWNER_SOCKET_DIR") or private_socket_dir(
            config.socket_dir
        )
        self.listen_path = os.path.join(self.socket_dir, f"{key}.sock")
        self.loop_thread_id: int | None = None
        self._thread: threading.Thread | None = None  # the controller's loop thread
        self.closed = False
        self._listener: Listener | None = None
        self._conns: dict[str, Connection] = {}
        # The paths each connection is known by (by id), so a close forgets them without
        # a scan of every connection (a controller of thousands of hosts closes thousands).
        self._conn_paths: dict[int, list[str]] = {}
        self._conns_lock = threading.Lock()
        self._dead_paths: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._pending: dict[int, ReplyHandler] = {}
        # The actors hosted here: a part of its own, given this runtime's links.
        self.hosting = Hosting(config, loop, self)
        # Calls made on other event loops get their replies read there (no thread hop).
        self.routes = ReplyRoutes(
            loop, self._new_route_connection, key, spin=self.config.reply_spin
        )
        self._parent: Connection | None = None
        # What the owner's connection closing does when not the default, ending this
        # process: a host agent holding a lease detaches instead (see _hosts._lease).
        self.on_owner_lost: Callable[[str], None] | None = None
        # When the owner's last heartbeat came (monotonic), for whoever watches it.
        self.owner_heard = time.monotonic()
        self.failure_handler: Callable[[str, int, str, memoryview], None] | None = None
        # Who else hears of each lost connection, after the requests waiting on it (a
        # host agent's bulk transfers, whose children it feeds: _hosts._bulk).
        self.connection_lost: list[Callable[[Connection, str], None]] = []
        # Bumped whenever a process is lost, marked dead or back, or the way to some
        # changed: what was planned for the processes as they were is stale then
        # (casts by plan, ``_hosts._cast_plan``).
        self.topology = 0
        # The job's secret: TCP peers prove it (workers started here inherit it).
        self.secret = config.secret or new_secret()
        # What this process tells peers to connect to: its Unix socket, or its TCP
        # address when its owner is on another host (see listen_tcp).
        self.address = self.listen_path
        self._tcp_listeners: dict[tuple[str, int], TcpListener] = {}
        # The interface other hosts reach this one at, once it listens on one: workers it
        # starts from then on listen there too (dual addresses, see _transport._address).
        self.advertise: str | None = None
        # Frame kinds the layers above handle (a host agent's RELAY, CAST, HOST, EVENT),
        # and where a REPLY that no request here waits for goes (an agent passes its
        # workers' replies on to their caller); both run on the loop thread.
        self.frame_kinds: dict[int, FrameKindHandler] = {}
        self.forward_reply: Callable[[Connection, list[memoryview]], None] | None = None
        # A host agent in a tree of agents takes the gathered replies its child agents
        # send up (every REPLIES frame it receives), to merge them into its own.
        self.forward_replies: FrameKindHandler | None = None
        # Who owns this process' processes (layer 3 plugs its part in; see _owner), and
        # what else closes once the runtime has (the job event log).
        self.owner: ProcessOwner = NO_PROCESSES
        self.on_shutdown: list[Callable[[], None]] = []
        # What a worker or agent does as it starts to exit, whatever the cause (a host
        # agent tells the agents it adopted to end: see _hosts._uplink).
        self.on_exit: list[Callable[[], None]] = []
        self._frames = self._frame_table()

    # -- construction -------------------------------------------------------------------

    @classmethod
    def get(cls: type[R]) -> R:
        """This process' runtime, starting a controller runtime on first use."""
        runtime = CoreRuntime._current
        if runtime is not None and not runtime.closed:
            return runtime  # type: ignore[return-value]
        with CoreRuntime._current_lock:
            runtime = CoreRuntime._current
            if runtime is None or runtime.closed:
                runtime = CoreRuntime._current = cls._start_controller(Config.from_env())
        return runtime  # type: ignore[return-value]

    @classmethod
    def current(cls: type[R]) -> R | None:
        """The runtime if one is running here, without starting one."""
        runtime = CoreRuntime._current
        if runtime is not None and not runtime.closed:
            return runtime  # type: ignore[return-value]
        return None

    @classmethod
    def _start_controller(cls: type[R], config: Config) -> R:
        loop = new_event_loop(config)
        runtime = cls(config, loop, key=f"ctl{os.getpid()}-{time.monotonic_ns() % 10**9}")
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            runtime.loop_thread_id = threading.get_ident()
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=main, name="actormesh-io", daemon=True)
        runtime._thread = thread
        thread.start()
        started.wait()
        runtime.run_sync(runtime._listen())
        atexit.register(runtime.shutdown)
        return runtime

    @classmethod
    def start_worker(
        cls: type[R],
        config: Config,
        loop: asyncio.AbstractEventLoop,
        key: str,
        parent_path: str,
        info: dict[str, Any] | None = None,
        *,
        tcp_fd: int | None = None,
        address: str | None = None,
        parent_sock: socket.socket | None = None,
    ) -> R:
        """Create the runtime of a worker on the calling thread's ``loop`` (not yet run).

        An owner at a ``tcp://`` address is on another host (or lets processes join): the
        worker then listens on TCP too, on ``Config.listen_host`` or else the interface
        that reaches the owner, and introduces itself by that address. An owner on this
        host whose workers other hosts call (a host agent's, or a controller's in a job
        across hosts) gives the worker a listening TCP socket instead (``tcp_fd``, made
        before the worker started, so its port and the worker's dual ``address`` were
        known in advance; a restarted worker gets its predecessor's). ``info`` travels in
        the HELLO (a joining process says who it is). ``parent_sock``: the owner dialled
        us (and authenticated) on this socket; ``parent_path`` is then its address.
        """
        runtime = cls(config, loop, key=key)
        runtime.loop_thread_id = threading.get_ident()
        CoreRuntime._current = runtime
        loop.run_until_complete(runtime._listen())
        if tcp_fd is not None and address is not None:
            runtime.listen_tcp(sock=socket.socket(fileno=tcp_fd))
            runtime.address = address
        elif is_tcp(parent_path):
            here = route_source(parent_path)
            tcp = runtime.listen_tcp(config.listen_host or here)
            if parse_tcp(tcp)[0] in ("0.0.0.0", "::"):
                # Listening everywhere: peers reach us where our owner does.
                tcp = format_tcp(here, parse_tcp(tcp)[1])
            runtime.address = tcp
        if parent_sock is not None:
            parent = runtime._new_connection(parent_sock, peer=parent_path, same_host=False)
            runtime._remember_conn(parent_path, parent)
            parent.start()
            runtime._parent = parent
        else:
            runtime._parent = runtime.connection(parent_path)
        hello = hdr.Hello(runtime.address, os.getpid(), key, info or {})
        runtime._parent.send([hdr.encode(hello)])
        return runtime

    async def _listen(self) -> None:
        self._listener = Listener(self.listen_path, self.loop, self._accepted)
        self._listener.start()

    def _accepted(self, sock: Any) -> None:
        conn = self._new_connection(sock, peer="incoming")
        conn.start()

    def _new_connection(
        self,
        sock: Any,
        peer: str,
        *,
        same_host: bool = True,
        loop: asyncio.AbstractEventLoop | None = None,
        on_close: CloseHandler | None = None,
    ) -> Connection:
        # Shared memory only between processes of one host: across TCP, buffers travel
        # as raw bytes after the frame header.
        return Connection(
            sock,
            loop or self.loop,
            self._on_frame,
            on_close or self._on_close,
            max_frame_bytes=self.config.max_message_bytes,
            shm_threshold=self.config.shm_threshold if same_host else 0,
            peer=peer,
        )

    def _new_route_connection(
        self, sock: Any, loop: asyncio.AbstractEventLoop, peer: str
    ) -> Connection:
        # Read by a caller's own loop. No request is watched on it (requests are watched
        # on the runtime's connection to the same process), so its loss fails nothing.
        return self._new_connection(sock, peer, loop=loop, on_close=self._on_route_close)

    def _on_route_close(self, conn: Connection, error: BaseException | None) -> None:
        self.routes.forget(conn)

    def reply_route(self) -> ReplyRoute | None:
        """The reply route of the foreign event loop running on this thread, if any."""
        return self.routes.current()

    def listen_tcp(
        self, host: str | None = None, port: int = 0, *, sock: socket.socket | None = None
    ) -> str:
        """Also accept TCP connections from peers with the job's secret; their address.

        ``host`` defaults to ``Config.listen_host``, else loopback; port 0 picks a free
        one. Asking again for a host already listened on returns the same address.
        ``sock``: listen on this socket, already bound and listening, instead.

        Listening on an interface other hosts reach makes it where this process' new
        workers listen too (``advertise``): a job across hosts can call them.
        """
        host = host or self.config.listen_host or "127.0.0.1"
        with self._conns_lock:
            for (bound_host, bound_port), listener in self._tcp_listeners.items():
                if sock is None and bound_host == host and port in (0, bound_port):
                    return listener.address
            listener = TcpListener(
                host,
                port,
                secret=self.secret,
                on_accept=self._tcp_accepted,
                limits=self.limits,
                sock=sock,
            )
            self._tcp_listeners[(listener.host, listener.port)] = listener
        listener.start()
        if sock is None and self.advertise is None and not _local_only(listener.host):
            self.advertise = listener.host
            if self.address == self.listen_path:
                # Other hosts reach this process (its ports, its own actors) there too.
                self.address = dual_address(self.listen_path, listener.address)
        return listener.address

    def tcp_addresses(self) -> set[str]:
        """Where this process' TCP listeners accept peers now."""
        with self._conns_lock:
            return {listener.address for listener in self._tcp_listeners.values()}

    def stop_listening(self, address: str) -> None:
        """Close the TCP listener at ``address`` (connections it let in stay open)."""
        host, port = parse_tcp(address)
        with self._conns_lock:
            listener = self._tcp_listeners.pop((host, port), None)
            others = {bound for bound, _ in self._tcp_listeners}
        if listener is not None:
            listener.close()
            if self.advertise == host and host not in others:
                self.advertise = None  # new workers no longer listen there
                if tcp_part(self.address) == address:
                    self.address = self.listen_path

    @property
    def limits(self) -> Limits:
        """What peers of this process' TCP listeners may hold before they authenticate."""
        return Limits(
            self.config.handshake_timeout,
            self.config.max_handshakes,
            self.config.max_handshakes_per_host,
        )

    def use_secret(self, secret: str) -> None:
        """Make ``secret`` the job's secret (before any worker or listener has another).

        Raises:
            ValueError: workers or TCP listeners of this process already use another one.
        """
        if secret == self.secret:
            return
        if self._tcp_listeners or self.owner.owns_processes():
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
        if self.inherited_by is not None:
            coro.close()
            self._refuse_inherited()
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _refuse_inherited(self) -> None:
        raise RuntimeError(
            f"this actormesh runtime belongs to process {self.owner_pid}, which forked "
            f"process {self.inherited_by}: a forked process cannot use its parent's meshes "
            "(their thread and connections are the parent's). Create meshes in the child "
            "(it gets a runtime of its own), or start it with multiprocessing's 'spawn'."
        )

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
        if conn is not None and not conn.closed and self.inherited_by is None:
            return conn
        if self.inherited_by is not None:
            self._refuse_inherited()
        concrete = route(path)  # of a dual address, the Unix socket here, else the TCP one
        tcp = is_tcp(concrete)
        with self._conns_lock:
            conn = self._conns.get(path)
            if conn is not None and not conn.closed:
                return conn
            if self.closed:
                raise MeshStoppedError("the actormesh runtime of this process has shut down")
            dead = self._dead_paths.get(path)
            if dead is not None:
                raise ActorDiedError(f"the process is dead: {dead}", reason=dead)
            # A way that closed knowing the process went with it (a relay whose host agent
            # died) is not dialled around: its death is only not recorded yet.
            gone = conn.gone_with if conn is not None else None
            if gone is not None:
                raise ActorDiedError(f"the process is dead: {gone}", reason=gone)
            if not tcp:
                conn = self._new_connection(self._dial(path), peer=path)
                self._remember_conn(path, conn)
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
                self._remember_conn(path, conn)
        assert conn is not None
        self.call_soon(conn.start)
        return conn

    def _remember_conn(self, path: str, conn: Connection) -> None:
        # Holds _conns_lock (or runs before the runtime is shared).
        self._conns[path] = conn
        self._conn_paths.setdefault(id(conn), []).append(path)

    def known_connection(self, path: str) -> Connection | None:
        """The open connection to ``path`` if there is one (never dials)."""
        conn = self._conns.get(path)
        return conn if conn is not None and not conn.closed else None

    def dial(self, path: str) -> Connection:
        """A new connection to the process at ``path``, known by no path (blocking: run
        it on a thread). The caller starts it once it is ready for its frames.

        Raises:
            ActorDiedError: nothing can be reached at ``path``.
        """
        return self._new_connection(self._dial(path), peer=path, same_host=not is_tcp(path))

    def connection_at(self, path: str) -> Connection | None:
        """The connection ``path`` is known by, open or not (a worker's, once closed,
        stays until its exit is handled: ``_hosts.Children``)."""
        return self._conns.get(path)

    def name_connection(self, path: str, conn: Connection) -> None:
        """Know ``conn`` as the connection to ``path`` from now on (a worker's HELLO, a
        process adopted, a worker behind an agent)."""
        with self._conns_lock:
            self._conns[path] = conn

    def mark_dead(self, path: str, reason: str) -> None:
        """The process at ``path`` is gone: dialling it raises ``ActorDiedError(reason)``."""
        self._dead_paths[path] = reason
        self.topology += 1

    def revive(self, path: str) -> None:
        """A process listens at ``path`` again (restarted, or adopted there)."""
        self._dead_paths.pop(path, None)
        self.topology += 1

    def adopt_owner(self, conn: Connection) -> None:
        """Make ``conn`` this process' owner's connection (a controller attached to a
        host agent's lease); only it may shut the process down from now on."""
        self._parent = conn

    @property
    def parent(self) -> Connection:
        """The connection to this process' owner (a worker's, or a host agent's)."""
        if self._parent is None:
            raise RuntimeError("this process has no owner (it is a controller)")
        return self._parent

    def _dial(self, path: str) -> Any:
        try:
            return connect_address(path, secret=self.secret)
        except OSError as error:
            reason = f"cannot reach the process at {path}: {error.strerror or error}"
            if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
                # Nobody listens there: the process is gone. Whether its mesh was stopped
                # (by its owner) or it died, only the owner knows; say both.
                reason += " (it has exited: its mesh was stopped, or it died)"
            raise ActorDiedError(reason, reason=reason) from None

    # -- requests -----------------------------------------------------------------------

    def register(self, handler: ReplyHandler) -> int:
        """A new request id whose replies go to ``handler``."""
        req_id = next(self._ids)
        self._pending[req_id] = handler
        return req_id

    def fresh_request_ids(self) -> None:
        """Draw request ids from a random point on: a controller attaching to a leased
        job must not reuse ids whose late replies (to a controller that died) may still
        pass through the job's agents."""
        self._ids = itertools.count(secrets.randbits(48) + (1 << 32))

    def count_request_ids_down(self) -> None:
        """Number this process' own requests -1, -2, ...: a host agent forwards the
        replies of its owner's requests (numbered from 1 up, or from a random point above
        2**32 by a controller that attached) and must never take one for its own."""
        self._ids = itertools.count(-1, -1)

    def forget(self, req_id: int) -> None:
        """Stop listening for a request (late replies are then dropped)."""
        self._pending.pop(req_id, None)

    def pending(self) -> list[ReplyHandler]:
        """The requests still listening for replies (loop thread)."""
        return list(self._pending.values())

    def send(
        self,
        conn: Connection,
        header: hdr.Header,
        parts: Sequence[Buffer],
        share: SegmentShare | None = None,
    ) -> None:
        """Send one frame (``header``: an instance of a class of ``_headers.KINDS``);
        raises ``ActorDiedError`` when the connection is gone.

        ``share``: the same parts go to other processes of this host (see ``Connection``).
        """
        try:
            conn.send([hdr.encode(header), *parts], share)
        except TransportClosed as error:
            raise ActorDiedError(str(error), reason=str(error)) from None

    # -- incoming frames ----------------------------------------------------------------

    def _frame_table(self) -> Table:
        """Each kind's handler, for ``dispatch`` (kinds the layers above add later, in
        ``frame_kinds``, go to ``_other_kind``)."""

        def header_only(handle: Callable[[Connection, tuple[Any, ...]], None]) -> Handler:
            return lambda conn, header, parts: handle(conn, header)

        handlers: dict[int, Handler] = {
            hdr.REPLY: self._handle_reply,
            hdr.REPLIES: self._handle_replies,
            hdr.FAILURE: self._handle_failure,
            # (the owner is looked up per frame: it is plugged in after this table is made)
            hdr.HELLO: lambda conn, header, parts: self.owner.hello(conn, header),
            hdr.SHUTDOWN: header_only(self._handle_shutdown),
            hdr.PING: header_only(self._handle_ping),
            hdr.PONG: lambda conn, header, parts: self.owner.answered(conn.peer),
            **self.hosting.handlers(),
        }
        return frame_table(hdr.LAYOUTS, handlers, self._other_kind)

    def receive(self, conn: Connection, parts: list[memoryview]) -> None:
        """Handle a frame as if ``conn`` carried it (loop thread): one that came wrapped
        in another (``UP``, ``ROUTE`` to an agent itself; see ``_hosts._uplink``)."""
        self._on_frame(conn, parts)

    def _on_frame(self, conn: Connection, parts: list[memoryview]) -> None:
        try:
            dispatch(self._frames, self._unreadable, conn, parts)
        except Exception:
            log.exception("failed to handle a frame from %s", conn.peer)

    def _unreadable(self, conn: Connection, error: Exception) -> None:
        # A frame this process cannot read (not a header, an unknown kind, a wrong
        # layout) means the peer does not speak our protocol, or not this version of
        # it: nothing it sends later can be trusted to line up either.
        log.warning(
            "closing the connection to %s after a frame it could not read: %s: %s",
            conn.peer or "a peer",
            type(error).__name__,
            error,
        )
        conn.close()

    def _handle_reply(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        # Unpacked straight from the checked wire tuple, in ``hdr.Reply``'s field order
        # (every answer comes here: no instance made; tests/unit/test_headers.py holds it).
        _, req_id, rank, ok = header
        handler = self._pending.get(req_id)
        if handler is not None:
            if handler.on_reply(rank, ok, parts[1:]):
                self._pending.pop(req_id, None)
        elif self.forward_reply is not None:
            self.forward_reply(conn, parts)

    def _handle_failure(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        mesh_id, rank, endpoint = hdr.read(hdr.Failure, header)
        if self.failure_handler is not None:
            self.failure_handler(mesh_id, rank, endpoint, parts[1])

    def _handle_shutdown(self, conn: Connection, header: tuple[Any, ...]) -> None:
        if conn is self._parent:  # only the owner may end this process
            self._exit_worker("asked to shut down")

    def _handle_ping(self, conn: Connection, header: tuple[Any, ...]) -> None:
        # Answered here, on the loop, so a busy actor thread cannot delay it.
        if conn is self._parent:
            self.owner_heard = time.monotonic()
        conn.send([hdr.encode(hdr.Pong(hdr.read(hdr.Ping, header).seq))])

    def _other_kind(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        handle = self.frame_kinds.get(header[0])
        if handle is None:
            raise ValueError(f"no handler for frames of kind {header[0]} in this process")
        handle(conn, header, parts)

    def _handle_replies(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        # Replies a host agent gathered from the workers of its host, in one frame.
        if self.forward_replies is not None:
            self.forward_replies(conn, header, parts)
            return
        offset = 1
        for req_id, rank, ok, count in hdr.read(hdr.Replies, header).replies:
            handler = self._pending.get(req_id)
            if handler is not None and handler.on_reply(rank, ok, parts[offset : offset + count]):
                self._pending.pop(req_id, None)
            offset += count

    # -- connection loss ----------------------------------------------------------------

    def _on_close(self, conn: Connection, error: BaseException | None) -> None:
        with self._conns_lock:
            for path in self._conn_paths.pop(id(conn), ()):
                if self._conns.get(path) is conn:
                    del self._conns[path]
        self.hosting.forget_reply_conn(conn)
        self.routes.peer_gone(conn.peer)
        if conn is self._parent:
            if self.on_owner_lost is not None:
                self.on_owner_lost("the owner went away")
            else:
                self._exit_worker("the owner went away")
            return
        if self.owner.connection_closed(conn, error):
            return
        detail = f": {error}" if error else ""
        self.fail_connection(conn, f"the connection to {conn.peer} was lost{detail}")

    def fail_connection(
        self, conn: Connection, reason: str, routed_before: int | None = None
    ) -> None:
        """Fail what waits on ``conn`` (``ReplyHandler.on_lost``), then tell
        ``connection_lost``'s listeners. ``routed_before``: fail only the requests whose
        frames found their way before ``topology`` reached that count (a request says
        when in ``routed_at``; one that does not is failed): the way to ``conn`` changed
        then, and the requests routed since went the new way."""
        self.topology += 1
        for req_id, handler in list(self._pending.items()):
            if routed_before is not None and getattr(handler, "routed_at", -1) >= routed_before:
                continue
            try:
                if handler.on_lost(conn, reason):
                    self._pending.pop(req_id, None)
            except Exception:
                log.exception("a reply handler failed while its connection died")
        for listener in list(self.connection_lost):
            try:
                listener(conn, reason)
            except Exception:
                log.exception("a listener failed while a connection died")

    # -- shutdown -----------------------------------------------------------------------

    def _exit_worker(self, why: str) -> None:
        if self.closed:
            return
        log.debug("worker %s exiting: %s", self.key, why)
        self.closed = True
        for leave in self.on_exit:
            with contextlib.suppress(Exception):
                leave()
        self.hosting.close_all()
        if self._listener is not None:
            self._listener.close()
        self._close_tcp_listeners()
        if self._own_socket_dir and not is_abstract(self.socket_dir):
            # A worker on another host, say: nobody else removes its directory.
            with contextlib.suppress(OSError):
                os.rmdir(self.socket_dir)
        self.loop.stop()

    def shutdown(self) -> None:
        """Stop every worker this process started and close the runtime (controller)."""
        if self.closed or self.inherited_by is not None:
            return  # (in a forked child, at its exit: the workers are the parent's)
        self.owner.stop_all()
        self.closed = True
        self.routes.close()
        if self.loop.is_running() and not self.in_loop_thread():
            # Wait for it: at interpreter exit a scheduled callback may never run, and the
            # socket directory would be left behind.
            with contextlib.suppress(Exception):
                self.run_sync(self._close_listener_soon(), timeout=5)
        else:
            self._close_listener()
        self._stop_loop_thread()
        for close in self.on_shutdown:
            close()

    async def _close_listener_soon(self) -> None:
        self._close_listener()

    def _stop_loop_thread(self) -> None:
        # A loop left running on its daemon thread may wake (a peer closing a connection)
        # while the interpreter finalizes, and crash taking a GIL that no longer exists.
        thread = self._thread
        if thread is None or not thread.is_alive() or self.in_loop_thread():
            return
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        thread.join(5.0)

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._close_tcp_listeners()
        if self._own_socket_dir and not is_abstract(self.socket_dir):
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def _forget_after_fork() -> None:
    """In a forked child: the parent's runtime stays behind. Its thread did not survive the
    fork and its sockets are the parent's (a frame written there would land in the
    parent's streams), so the child gets a runtime of its own on first use, and the old
    object refuses to work (``_refuse_inherited``)."""
    inherited = CoreRuntime._current
    CoreRuntime._current = None
    CoreRuntime._current_lock = threading.Lock()
    if inherited is not None:
        inherited.inherited_by = os.getpid()


os.register_at_fork(after_in_child=_forget_after_fork)
