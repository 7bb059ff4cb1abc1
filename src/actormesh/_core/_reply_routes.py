"""Reply routes: replies to calls made on a foreign event loop are read on that loop.

The runtime reads every connection on its own loop (a thread of its own in the
controller). A call awaited on another loop (the user's ``asyncio.run``, a Jupyter
kernel) would then pay a hop between threads for each reply: the runtime's thread reads
it, wakes the caller's loop, and that loop wakes the task, about 40 to 60 µs on a small
VM. A ``ReplyRoute`` removes the hop: the caller's loop opens its own connection to each
process it calls and says ``REPLY_TO token`` on it; calls still go out on the runtime's
one connection per process (so the order of one sender's messages holds) but name the
token, and the worker answers on the route's connection, which the caller's loop reads.

Invariants that keep this safe:

- A call's liveness never depends on a route: the request is registered with the
  runtime and watched on the runtime's connection, so a dead process fails it as before.
  A worker that does not know the token (yet) answers on the runtime's connection.
- A route's connections are read by exactly one thread at a time: its loop while that
  loop lives; ``pump`` on the loop's own thread while the loop is blocked in
  ``Future.get()`` (it cannot read then); the runtime's loop once the route's loop is
  closed (``adopt``), for good. A closed loop never runs again, so the hand-over races
  with nobody.
- Routes cost nothing to loops that live for a few calls: a loop gets one after its
  first ``_ROUTE_AFTER`` calls, and a route of a closed loop is closed as soon as no
  routed call waits on it (so ``asyncio.run`` in a loop leaves no sockets behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .._transport import Connection, connect_unix, is_tcp, unix_path
from .._transport import route as route_of
from .._transport._blocking import exchange_frame
from . import _envelope as env

__all__ = ["ReplyRoute", "ReplyRoutes"]

# Seconds between the runtime's checks for routes whose loop has closed.
_ADOPT_EVERY = 1.0
# Seconds a process has to confirm a new route (it answers from its loop, never busy).
_CONFIRM_TIMEOUT = 2.0
# Longest a pumping Future.get() sleeps in select before looking at its future again.
_PUMP_SLICE = 0.05
# Calls a loop makes before it gets a route: a loop that lives for one call (a sync
# wrapper around asyncio.run, say) would pay a connection and a round trip for nothing.
_ROUTE_AFTER = 8

ConnectionFactory = Callable[[Any, asyncio.AbstractEventLoop, str], Connection]


class ReplyRoute:
    """The connections one foreign event loop reads its replies on, one per process."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        token: str,
        new_connection: ConnectionFactory,
        request_adoption: Callable[[], None],
        on_idle_adopted: Callable[[ReplyRoute], None],
    ) -> None:
        self.loop = loop
        self.token = token
        self.thread_id = threading.get_ident()
        self.adopted = False
        self._new_connection = new_connection
        self._request_adoption = request_adoption
        self._on_idle_adopted = on_idle_adopted
        self._conns: dict[str, Connection] = {}
        self._refused: set[str] = set()  # processes that did not confirm a route
        self._lock = threading.Lock()
        self._calls = 0  # calls made on the loop (loop thread only)
        self._pending = 0  # routed calls not finished yet (any thread)

    def begin(self) -> bool:
        """A call is made on the loop: True if it is routed (then ``end`` must follow)."""
        self._calls += 1
        if self._calls <= _ROUTE_AFTER or self.adopted:
            return False
        with self._lock:
            self._pending += 1
        return True

    def end(self) -> None:
        """A routed call finished (any thread); an adopted route closes once idle."""
        with self._lock:
            self._pending -= 1
            idle = self._pending == 0 and self.adopted
        if idle:
            self._on_idle_adopted(self)

    @property
    def idle(self) -> bool:
        """True when no routed call waits for a reply on this route."""
        return self._pending == 0

    def token_for(self, path: str) -> str | None:
        """The token to put in a call to ``path``, opening the route there on first use.

        Runs on the route's loop thread. ``None`` when replies should come back the usual
        way: a process on another host, a route already handed to the runtime, or a
        process that did not confirm the route in time (a call there says why, if dead).
        """
        conn = self._conns.get(path)
        if conn is not None and not conn.closed:
            return self.token
        concrete = route_of(path)  # of a dual address, the Unix socket on this host
        if self.adopted or is_tcp(concrete) or path in self._refused:
            return None
        try:
            sock = _open(unix_path(concrete), self.token)
        except (OSError, ValueError):
            self._refused.add(path)
            return None
        conn = self._new_connection(sock, self.loop, path)
        conn.start()
        self._conns[path] = conn
        return self.token

    def must_pump(self) -> bool:
        """True when a blocking wait must read this route itself: it runs on the route's
        loop thread, so that loop cannot read while it waits."""
        return (
            not self.adopted
            and threading.get_ident() == self.thread_id
            and not self.loop.is_closed()
        )

    def check_orphaned(self) -> None:
        """A waiter calls this first: a route whose loop closed goes to the runtime now,
        rather than at the runtime's next periodic check."""
        if not self.adopted and self.loop.is_closed():
            self._request_adoption()

    def pump(self, done: Callable[[], bool], timeout: float | None) -> None:
        """Read this route's connections on this thread until ``done()`` or ``timeout``.

        For a ``Future.get()`` on the route's own loop thread (a Jupyter cell in sync
        style, say): the loop is blocked in this call and cannot read its replies. The
        select wakes at least every 50 ms to see answers that came the other way (a death
        the runtime noticed, an answer on the runtime's connection).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            wait = _PUMP_SLICE
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return
            conns = [conn for conn in self._conns.values() if not conn.closed]
            try:
                readable, _, _ = select.select(conns, [], [], wait)
            except (InterruptedError, ValueError):
                continue  # a connection closed meanwhile: list them again
            for conn in readable:
                conn.read_ready()

    def adopt(self, runtime_loop: asyncio.AbstractEventLoop) -> bool:
        """Hand the connections to the runtime's loop (on its thread; the route's loop is
        closed and will never read them again). False when idle: then it just closes."""
        with self._lock:
            self.adopted = True
            idle = self._pending == 0
        if idle:
            self.close()
            return False
        for conn in self._conns.values():
            if not conn.closed:
                conn.move_to(runtime_loop)
        return True

    def close(self) -> None:
        """Close every connection of the route."""
        orphaned = not self.adopted and self.loop.is_closed()  # no loop will close them
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            if orphaned:
                conn.close_orphaned()
            else:
                conn.close()

    def forget(self, conn: Connection) -> None:
        """``conn`` closed: the next call opens a new one (the process restarted, say)."""
        for path, known in list(self._conns.items()):
            if known is conn:
                del self._conns[path]


def _open(path: str, token: str) -> socket.socket:
    """A connection to ``path`` on which the process has confirmed ``REPLY_TO token``.

    Waiting for the confirmation (one round trip, once per loop and process) makes the
    route certain before the first call names it: the call goes out on another socket,
    and could otherwise be read first and answered the usual way.
    """
    sock = connect_unix(path)
    try:
        sock.settimeout(_CONFIRM_TIMEOUT)
        hello = env.encode_header((env.REPLY_TO, token))
        answer = exchange_frame(sock, [hello], "a reply route's confirmation")
        if len(answer) != 1 or env.decode_header(answer[0]) != (env.REPLY_TO, token):
            raise ValueError(f"unexpected answer to REPLY_TO: {answer!r}")
    except BaseException:
        sock.close()
        raise
    return sock


class ReplyRoutes:
    """The reply routes of one runtime, by event loop.

    Args:
        runtime_loop: the runtime's own loop (calls made on it need no route).
        new_connection: builds a connection for a route: ``(sock, loop, peer)``.
        prefix: makes tokens unique in the job (the runtime's key).
    """

    def __init__(
        self,
        runtime_loop: asyncio.AbstractEventLoop,
        new_connection: ConnectionFactory,
        prefix: str,
    ) -> None:
        self._runtime_loop = runtime_loop
        self._new_connection = new_connection
        self._prefix = prefix
        self._ids = itertools.count(1)
        self._routes: dict[asyncio.AbstractEventLoop, ReplyRoute] = {}
        self._adopted: list[ReplyRoute] = []  # read by the runtime now; closed with it
        self._lock = threading.Lock()
        self._watching = False
        self.closed = False

    def current(self) -> ReplyRoute | None:
        """The route of the loop running on this thread, if it is a foreign one."""
        loop = asyncio._get_running_loop()
        if loop is None or loop is self._runtime_loop or self.closed:
            return None
        route = self._routes.get(loop)
        if route is None:
            closed: list[ReplyRoute] = []
            with self._lock:
                route = self._routes.get(loop)
                if route is None:
                    token = f"{self._prefix}/{next(self._ids)}"
                    route = ReplyRoute(
                        loop,
                        token,
                        self._new_connection,
                        self.request_adoption,
                        self._drop_adopted,
                    )
                    self._routes[loop] = route
                    closed = self._take_closed_idle()
                    if not self._watching:
                        self._watching = True
                        self._runtime_loop.call_soon_threadsafe(self._watch)
            for old in closed:
                old.close()  # nobody reads them: their loops are closed, no call waits
        return route

    def _take_closed_idle(self) -> list[ReplyRoute]:
        # With the lock held: the routes of closed loops that no call waits on, removed.
        # A program that runs asyncio.run in a loop makes one route per run.
        done = [loop for loop, route in self._routes.items() if loop.is_closed() and route.idle]
        return [self._routes.pop(loop) for loop in done]

    def _drop_adopted(self, route: ReplyRoute) -> None:
        with self._lock:
            if route in self._adopted:
                self._adopted.remove(route)
        route.close()

    def adopt_closed(self) -> None:
        """Hand every route whose loop has closed to the runtime (runtime's loop thread)."""
        with self._lock:
            closed = [loop for loop in self._routes if loop.is_closed()]
            routes = [self._routes.pop(loop) for loop in closed]
        for route in routes:
            if route.adopt(self._runtime_loop):
                with self._lock:
                    if not route.idle:
                        self._adopted.append(route)
                        continue
                route.close()  # its last call ended while it was being adopted

    def request_adoption(self) -> None:
        """Ask the runtime's loop to adopt closed routes now (any thread)."""
        with contextlib.suppress(RuntimeError):
            self._runtime_loop.call_soon_threadsafe(self.adopt_closed)

    def _watch(self) -> None:
        # While foreign routes exist, look for closed loops once a second: a reply that
        # arrives after its loop closed is then still read (by the runtime).
        self.adopt_closed()
        with self._lock:
            if not self._routes or self.closed:
                self._watching = False
                return
        self._runtime_loop.call_later(_ADOPT_EVERY, self._watch)

    def forget(self, conn: Connection) -> None:
        """A route connection closed."""
        with self._lock:
            routes = [*self._routes.values(), *self._adopted]
        for route in routes:
            route.forget(conn)

    def close(self) -> None:
        """Close every route (the runtime is shutting down)."""
        with self._lock:
            self.closed = True
            routes = [*self._routes.values(), *self._adopted]
            self._routes.clear()
            self._adopted.clear()
        for route in routes:
            route.close()
