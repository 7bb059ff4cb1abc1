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
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .._transport import Connection, connect_unix, exchange_frame, is_tcp, unix_path
from .._transport import route as route_of
from . import _headers as hdr

__all__ = ["ReplyRoute", "ReplyRoutes", "ThreadRoute"]

# Seconds between the runtime's checks for routes whose loop has closed.
_ADOPT_EVERY = 1.0
# Seconds a process has to confirm a new route (it answers from its loop, never busy).
_CONFIRM_TIMEOUT = 2.0
# Longest a pumping Future.get() sleeps in select before looking at its future again.
_PUMP_SLICE = 0.05
# Seconds before a route to a process that did not confirm it in time is tried again:
# its loop may have been busy for a while (a long callback), not for good.
_RETRY_REFUSED = 30.0
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
        spin: float = 0.0,
    ) -> None:
        self.loop = loop
        self.token = token
        self._spin = spin  # seconds to poll for a reply before sleeping (Config.reply_spin)
        self._polled: tuple[tuple[Connection, ...], select.poll, dict[int, Connection]] | None
        self._polled = None
        self.thread_id = threading.get_ident()
        self.adopted = False
        self._new_connection = new_connection
        self._request_adoption = request_adoption
        self._on_idle_adopted = on_idle_adopted
        self._conns: dict[str, Connection] = {}
        # Processes that did not confirm a route, and when: tried again after a while.
        self._refused: dict[str, float] = {}
        self._lock = threading.Lock()
        self._calls = 0  # calls made on the loop (loop thread only)
        self.route_after = _ROUTE_AFTER
        self._pending = 0  # routed calls not finished yet (any thread)

    def begin(self) -> bool:
        """A call is made on the loop: True if it is routed (then ``end`` must follow)."""
        self._calls += 1
        if self._calls <= self.route_after or self.adopted:
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
        process that did not confirm the route in time (a call there says why, if dead;
        the route is tried again ``_RETRY_REFUSED`` seconds later).
        """
        conn = self._conns.get(path)
        if conn is not None and not conn.closed:
            return self.token
        concrete = route_of(path)  # of a dual address, the Unix socket on this host
        refused = self._refused.get(path)
        if refused is not None and time.monotonic() - refused < _RETRY_REFUSED:
            return None
        if self.adopted or is_tcp(concrete):
            return None
        try:
            sock = _open(unix_path(concrete), self.token)
        except (OSError, ValueError):
            self._refused[path] = time.monotonic()
            return None
        conn = self._new_connection(sock, self.loop, path)
        with self._lock:
            # The runtime may have adopted the route while the process confirmed it (a
            # thread's route whose thread sat here over a second, the process' loop busy
            # importing, say): it moved the connections it had, not this one, which
            # nobody would read. Replies go the usual way; the process forgets the token
            # when it sees the connection close.
            if self.adopted:
                conn.close()
                return None
            self._conns[path] = conn
        self._start(conn)
        return self.token

    def _start(self, conn: Connection) -> None:
        """Begin reading a new connection of the route (on the route's loop)."""
        conn.start()

    def foreign_waiter(self) -> None:
        """Someone other than the route's reader waits on one of its calls (a callback, a
        ``get()`` on another thread). A loop reads its route whatever its callers do."""

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

    def pump(self, done: Callable[[], bool], timeout: float | None, spin: bool = True) -> bool:
        """Read this route's connections on this thread until ``done()`` or ``timeout``.

        For a ``Future.get()`` on the route's own loop thread (a Jupyter cell in sync
        style, say): the loop is blocked in this call and cannot read its replies. The
        select wakes at least every 50 ms to see answers that came the other way (a death
        the runtime noticed, an answer on the runtime's connection).

        Returns False when it stopped early because the route was handed to the runtime
        (the caller then waits for the runtime to read it); True otherwise.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            wait = _PUMP_SLICE
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return True
            conns: list[Any] = [conn for conn in list(self._conns.values()) if not conn.closed]
            try:
                readable, _, _ = select.select([*conns, *self._wake_fds()], [], [], wait)
            except (InterruptedError, ValueError, OSError):
                continue  # a connection closed meanwhile: list them again
            for conn in readable:
                if isinstance(conn, int):
                    self._drain_wake()
                else:
                    conn.read_ready()
        return True

    def poll_briefly(self, done: Callable[[], bool]) -> None:
        """Before an ``await`` on the route's loop yields: read this route's replies for
        up to ``reply_spin`` seconds, while ``done()`` is false, if the loop has nothing
        else to run.

        A quick call's reply then finds the loop awake, which spares the worker the cost
        of waking it and the caller the latency of waking up. Only on loops whose ready
        queue can be seen (asyncio's own); never while other callbacks are ready, so no
        other task waits for it. Callers poll only for a call to one actor: the replies
        of several processes need the processors a poll would hold (4 workers on 2 cores
        answer later, not sooner, while the caller polls).
        """
        if not self._spin or self.adopted or threading.get_ident() != self.thread_id:
            return
        ready = getattr(self.loop, "_ready", None)
        if ready is None or len(ready):
            return
        poller, by_fd = self._poller()
        if not by_fd:
            return
        until = time.perf_counter() + self._spin
        while not done() and time.perf_counter() < until:
            self._read(poller.poll(0), by_fd)

    def _read(self, ready: list[tuple[int, int]], by_fd: dict[int, Connection]) -> None:
        """Read the connections ``poll`` found ready (or consume a wake-up)."""
        for fd, _ in ready:
            conn = by_fd.get(fd)
            if conn is None:
                self._drain_wake()
            elif conn.closed:
                self._polled = None  # closed since the poll was built: build it without
            else:
                conn.read_ready()

    def _poller(self) -> tuple[select.poll, dict[int, Connection]]:
        # What a poll waits on: kept while the route has the same connection objects
        # (compared as a tuple: identity first, in C). The key holds the objects, not
        # their id(): once a closed one is freed, a new one (to a new process) can be
        # given its id, and the poll would go on watching the old descriptor. Closed
        # ones are left out; one that closes later is seen by ``_read``, which drops the
        # poll to be built again. (``tuple`` copies the values in one step: the runtime's
        # thread may forget a connection meanwhile.)
        conns = tuple(self._conns.values())
        polled = self._polled
        if polled is None or polled[0] != conns:
            poller = select.poll()
            by_fd = {}
            for conn in conns:
                if not conn.closed:
                    by_fd[conn.fileno()] = conn
                    poller.register(conn.fileno(), select.POLLIN)
            for fd in self._wake_fds():
                poller.register(fd, select.POLLIN)
            polled = self._polled = (conns, poller, by_fd)
        return polled[1], polled[2]

    def _wake_fds(self) -> list[int]:
        """Descriptors beside the connections that end a pump's wait (none for loops)."""
        return []

    def _drain_wake(self) -> None:
        """Consume the wake-up that ended a pump's wait."""

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

    def close_path(self, path: str) -> None:
        """Close the connection to ``path``, if any (a pump reading it sees it closed)."""
        conn = self._conns.pop(path, None)
        if conn is not None:
            conn.close()

    def forget(self, conn: Connection) -> None:
        """``conn`` closed: the next call opens a new one (the process restarted, say)."""
        for path, known in list(self._conns.items()):
            if known is conn:
                del self._conns[path]


class ThreadRoute(ReplyRoute):
    """The connections one thread without an event loop reads its replies on.

    Sync code (a script's main thread, an actor's ``def`` endpoint calling another mesh)
    waits in ``Future.get()``. Without a route the runtime's thread reads each reply and
    wakes the waiting thread: two wake-ups and a thread hand-off per call. With one, the
    waiting thread reads its own reply (``pump``: a blocking receive), the runtime's
    thread never wakes. Nobody else reads the route while its thread is not waiting, so
    the route goes to the runtime for good (``hand_over``) as soon as anything else waits
    for one of its calls: a done-callback, an ``await``, a ``get()`` on another thread,
    or nobody (the runtime looks once a second for a dead thread, or calls left waiting
    with no ``get()`` under way). A pump on the thread never overlaps the runtime's
    reading: the hand-over completes on the runtime's loop once no pump runs.
    """

    def __init__(
        self,
        runtime_loop: asyncio.AbstractEventLoop,
        token: str,
        new_connection: ConnectionFactory,
        hand_over: Callable[[ThreadRoute], None],
        on_idle_adopted: Callable[[ReplyRoute], None],
        spin: float = 0.0,
    ) -> None:
        super().__init__(runtime_loop, token, new_connection, lambda: None, on_idle_adopted, spin)
        self.thread = threading.current_thread()
        self._hand_over = hand_over
        self.pumping = False
        self.progress = 0  # pumps and calls so far: the runtime's sign of life
        self.seen = 0  # ``progress`` at the runtime's last look
        # Written by a thread that settles one of our calls while we pump (a death, an
        # answer that came the runtime's way): the pump sees it at once, not in 50 ms.
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def _start(self, conn: Connection) -> None:
        pass  # read by pumping only, until handed over (``adopt`` starts them then)

    def begin(self) -> bool:
        self.progress += 1
        return super().begin()

    def must_pump(self) -> bool:
        return not self.adopted and threading.get_ident() == self.thread_id

    def check_orphaned(self) -> None:
        pass  # a thread has no "closed": the runtime's periodic look finds dead ones

    def foreign_waiter(self) -> None:
        if not self.adopted:
            self._hand_over(self)

    def claim(self) -> bool:
        """Mark the route handed over (any thread). True when nobody pumps it now, so
        the runtime may start reading it; else the pump hands it over as it stops."""
        with self._lock:
            if self.adopted:
                return False
            self.adopted = True
            if not self.pumping:
                return True
        self._wake()  # the pump stops now, and hands the route over itself
        return False

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_write, b"!")

    def pump(self, done: Callable[[], bool], timeout: float | None, spin: bool = True) -> bool:
        # The loop routes' pump, made lean: this one runs once per call of sync code.
        # ``spin``: poll for up to ``reply_spin`` before sleeping (see ``poll_briefly``).
        with self._lock:
            if self.adopted:
                return False
            self.pumping = True
        self.progress += 1
        finished = True
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not done() and not self.adopted:
                wait = _PUMP_SLICE
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                poller, by_fd = self._poller()
                ready: list[tuple[int, int]] = []
                if spin and self._spin:
                    # Poll a little before sleeping: a quick call's reply then finds this
                    # thread awake, which spares both sides the cost of a wake-up.
                    until = time.perf_counter() + min(self._spin, wait)
                    while not ready and time.perf_counter() < until:
                        ready = poller.poll(0)
                self._read(ready or poller.poll(wait * 1000), by_fd)
            else:
                finished = not self.adopted or done()
        finally:
            with self._lock:
                self.pumping = False
                handing = self.adopted
            if handing:  # claimed while we pumped: the runtime reads from now on
                self._hand_over(self)
        return finished and not handing

    def end(self) -> None:
        super().end()
        if self.pumping and threading.get_ident() != self.thread_id:
            self._wake()

    def _wake_fds(self) -> list[int]:
        return [self._wake_read] if self._wake_read >= 0 else []

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self._wake_read, 4096)

    def close(self) -> None:
        super().close()
        with self._lock:
            fds, self._wake_read, self._wake_write = (self._wake_read, self._wake_write), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def _open(path: str, token: str) -> socket.socket:
    """A connection to ``path`` on which the process has confirmed ``REPLY_TO token``.

    Waiting for the confirmation (one round trip, once per loop and process) makes the
    route certain before the first call names it: the call goes out on another socket,
    and could otherwise be read first and answered the usual way.
    """
    sock = connect_unix(path)
    try:
        sock.settimeout(_CONFIRM_TIMEOUT)
        hello = hdr.encode(hdr.ReplyTo(token))
        answer = exchange_frame(sock, [hello], "a reply route's confirmation")
        if len(answer) != 1 or hdr.decode(answer[0]) != (hdr.REPLY_TO, token):
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
        spin: float = 0.0,
    ) -> None:
        self._runtime_loop = runtime_loop
        self._new_connection = new_connection
        self._prefix = prefix
        self._spin = spin
        self._ids = itertools.count(1)
        self._routes: dict[asyncio.AbstractEventLoop, ReplyRoute] = {}
        self._threads: dict[int, ThreadRoute] = {}  # by thread identifier
        # Routes handed over while their thread lived, by thread.
        self._handed: weakref.WeakKeyDictionary[threading.Thread, int] = weakref.WeakKeyDictionary()
        self._adopted: list[ReplyRoute] = []  # read by the runtime now; closed with it
        self._lock = threading.Lock()
        self._watching = False
        self.closed = False

    def current(self) -> ReplyRoute | None:
        """The route of the loop running on this thread, if it is a foreign one, or of
        this thread if it runs no loop."""
        loop = asyncio._get_running_loop()
        if loop is None:
            return None if self.closed else self._thread_route()
        if loop is self._runtime_loop or self.closed:
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
                        self._spin,
                    )
                    self._routes[loop] = route
                    closed = self._take_closed_idle()
                    self._start_watching()
            for old in closed:
                old.close()  # nobody reads them: their loops are closed, no call waits
        return route

    def _thread_route(self) -> ThreadRoute:
        thread = threading.get_ident()
        route = self._threads.get(thread)
        if route is None or not route.thread.is_alive():
            with self._lock:
                route = ThreadRoute(
                    self._runtime_loop,
                    f"{self._prefix}/{next(self._ids)}",
                    self._new_connection,
                    self._hand_over,
                    self._drop_adopted,
                    self._spin,
                )
                # A thread whose routes were handed over before waits longer for the next
                # (each costs a connection per process): 8, 16, ... up to 8192 calls.
                handed = self._handed.get(threading.current_thread(), 0)
                route.route_after = _ROUTE_AFTER << min(handed, 10)
                old, self._threads[thread] = self._threads.get(thread), route
                self._start_watching()
            if old is not None:  # a dead thread's (its identifier was reused)
                self._hand_over(old)
        return route

    def _hand_over(self, route: ThreadRoute) -> None:
        """Have the runtime read ``route`` from now on (any thread; see ``ThreadRoute``)."""
        with self._lock:
            if self._threads.get(route.thread_id) is route:
                del self._threads[route.thread_id]  # the thread's next calls: a new route
                if route.thread.is_alive():  # (a thread's identifier outlives it)
                    self._handed[route.thread] = self._handed.get(route.thread, 0) + 1
        if route.claim() or not route.pumping:
            with contextlib.suppress(RuntimeError):  # a closed loop: shutting down
                self._runtime_loop.call_soon_threadsafe(self._adopt_thread_route, route)

    def _adopt_thread_route(self, route: ThreadRoute) -> None:
        # On the runtime's loop, with nobody pumping the route (see ThreadRoute.claim).
        if route.pumping or route in self._adopted or self.closed:
            return
        if route.adopt(self._runtime_loop):
            with self._lock:
                if not route.idle:
                    self._adopted.append(route)
                    return
            route.close()

    def _start_watching(self) -> None:
        # With the lock held.
        if not self._watching:
            self._watching = True
            self._runtime_loop.call_soon_threadsafe(self._watch)

    def _look_at_threads(self) -> None:
        # Routes whose thread died, or whose calls wait with nobody pumping since the last
        # look, go to the runtime: their replies must still be read.
        with self._lock:
            routes = list(self._threads.values())
        for route in routes:
            stalled = not route.idle and not route.pumping and route.progress == route.seen
            route.seen = route.progress
            if stalled or not route.thread.is_alive():
                self._hand_over(route)

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
        # arrives after its loop closed is then still read (by the runtime). Threads'
        # routes likewise (see _look_at_threads).
        self.adopt_closed()
        self._look_at_threads()
        with self._lock:
            if not (self._routes or self._threads) or self.closed:
                self._watching = False
                return
        self._runtime_loop.call_later(_ADOPT_EVERY, self._watch)

    def descriptors(self) -> set[int]:
        """The descriptors of threads' routes now open, sockets and wake-up pipes (for
        leak checks: they are the runtime's, as its own connections are)."""
        with self._lock:
            routes = list(self._threads.values())
        found = {conn.fileno() for route in routes for conn in list(route._conns.values())}
        for route in routes:
            found.update(route._wake_fds())
            found.add(route._wake_write)
        return found

    def peer_gone(self, path: str) -> None:
        """The runtime's own connection to ``path`` closed (the process died or left):
        threads' connections there close too. Nobody may be reading them to see it (a
        loop reads its own and sees the hang-up)."""
        with self._lock:
            routes = list(self._threads.values())
        for route in routes:
            route.close_path(path)

    def forget(self, conn: Connection) -> None:
        """A route connection closed."""
        with self._lock:
            routes = [*self._routes.values(), *self._threads.values(), *self._adopted]
        for route in routes:
            route.forget(conn)

    def close(self) -> None:
        """Close every route (the runtime is shutting down)."""
        with self._lock:
            self.closed = True
            routes = [*self._routes.values(), *self._threads.values(), *self._adopted]
            self._routes.clear()
            self._threads.clear()
            self._adopted.clear()
        for route in routes:
            route.close()
