"""A hosted actor's mailbox: ordered, one-at-a-time execution of its messages.

Messages from all senders enter one queue and run in arrival order (so one sender's
messages run in send order), one at a time, never on the process' event loop (the one
that reads the sockets, answers heartbeats and serves the other actors):

- ``def`` endpoints run on the actor's own thread, so a blocking step never stalls I/O,
  heartbeats or other actors;
- ``async def`` endpoints run as tasks on the actor's own event loop, on a thread of its
  own, so an endpoint that blocks (a long compute step written as ``async def``, a
  ``Future.get()`` or a ``spawn_procs()`` inside it) stalls only its actor.

An actor whose endpoints are all ``async`` is built (``__init__``) on its loop's thread,
and every other one on its own thread: each actor's code runs on one thread, as in
Monarch, so thread-local state set in ``__init__`` is there in its endpoints. (An actor
that mixes both kinds, an actormesh extension, uses both threads.) Concurrent endpoints
skip the queue: each starts a task on the actor's loop on arrival, even while the actor
is busy with another message. The reply is sent by whichever thread finished the work:
there is no hop back to the process' loop before the caller hears.

Whoever runs the head of the queue drains it: the actor loop's task while the head is an
``async`` endpoint, the actor's thread while it is a ``def`` one, handing over when the
kind changes. A run of calls of one kind thus costs one hand-off when the first arrives
and nothing after (the queue and who drains it are shared under a lock).

Cancellation: a caller that gives up sends CANCEL; a queued message is dropped, a running
``async`` endpoint has its task cancelled, and a running ``def`` endpoint sees a flag it
may poll (``CURRENT_MESSAGE``, read by ``actormesh.cancelled()``). The mailbox also knows
what it is running and since when, for the runtime to tell a caller that timed out, and
(unless ``stats`` is off) what each endpoint has done, for ``actormesh top``.

Closing: queued messages fail; the actor's running tasks (concurrent endpoints, an
``async`` endpoint) are cancelled and finish; then its close hooks (``__cleanup__``) run
on its thread, after the ``def`` endpoint it is busy with, if any; then its threads end.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import inspect
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, Protocol

from . import _otel
from ._endpoint_stats import EndpointStats
from ._timeline import RECORDER

log = logging.getLogger("actormesh.mailbox")

__all__ = ["BuildOnLoop", "CURRENT_MESSAGE", "EndpointKind", "Hosted", "Mailbox", "Message"]


class EndpointKind(enum.Enum):
    """How an endpoint runs."""

    ASYNC = "async"
    SYNC = "sync"
    CONCURRENT = "concurrent"


class Hosted(Protocol):
    """What the runtime needs from a hosted actor (implemented by the actor layer)."""

    context: contextvars.Context

    def kind(self, endpoint: str) -> EndpointKind:
        """How ``endpoint`` runs; raises when it is not an endpoint."""
        ...

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the endpoint: a value for ``def`` ones, a coroutine for ``async`` ones."""
        ...

    def close(
        self, error: BaseException | None, on_loop: Callable[[Callable[[], Any]], Any]
    ) -> None:
        """The actor is being dropped: its mesh stopped, or ``error`` ended it.

        Runs on the actor's thread; ``on_loop(fn)`` runs ``fn`` (a coroutine function too)
        on the actor's loop and returns its value, for ``async`` hooks.
        """
        ...


class Message(Protocol):
    """One delivery to one actor: what to run and how to answer."""

    endpoint: str
    cancelled: bool  # set when the caller gave up; a running ``def`` endpoint may poll it

    def arguments(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments, unpickled for this actor."""
        ...

    def succeed(self, value: Any) -> None:
        """Send the endpoint's value to the caller (any thread)."""
        ...

    def fail(self, error: BaseException) -> None:
        """Send the endpoint's exception to the caller (any thread)."""
        ...

    def fail_init(self, error: BaseException) -> None:
        """The actor's ``__init__`` raised ``error`` before this message could run."""
        ...

    def abandon(self, error: BaseException, as_sent: bool = False) -> None:
        """The message will never run (its actor was stopped or dropped): a caller that
        waits gets ``error`` (``as_sent``: raised as it is, not as an ``ActorError``
        around it); nothing is reported for a message nobody waits on."""
        ...


_STOP = object()

# The message the running endpoint is handling (on the actor's thread and in its task).
CURRENT_MESSAGE: contextvars.ContextVar[Message | None] = contextvars.ContextVar(
    "actormesh_current_message", default=None
)

# Seconds the actor's running tasks get to finish once cancelled, when it is closed.
_CANCEL_WAIT = 5.0
# Seconds an ``async`` ``__cleanup__`` may run.
_CLEANUP_WAIT = 10.0


class BuildOnLoop:
    """What ``construct``'s factory returns for an actor to be built on its loop's thread
    (an actor whose endpoints are all ``async``): ``build`` makes the ``Hosted`` there."""

    __slots__ = ("build",)

    def __init__(self, build: Callable[[], Hosted]) -> None:
        self.build = build


class Mailbox:
    """Ordered execution for one hosted actor.

    Args:
        loop: the process' event loop; ``deliver``, ``cancel`` and ``close`` must be
            called on its thread.
        name: label of the actor's threads.
        stats: record each endpoint's calls, errors and run times (``self.stats``).
        new_loop: makes the actor's own event loop (made when the actor first needs it).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        name: str,
        *,
        stats: bool = True,
        new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self._loop = loop
        self._name = name
        self._new_loop = new_loop
        self.stats = EndpointStats() if stats else None
        # The queue, and whether someone (the loop's task or the actor's thread) drains it.
        self._lock = threading.Lock()
        self._queue: deque[Message] = deque()
        # Urgent messages (supervision events) run before the queued ones.
        self._urgent: deque[Message] = deque()
        self._urgent_waiting = 0  # urgent ones sent to the actor's loop, not started yet
        self._running = False
        self._closed = False
        self._halted = False  # an endpoint ended the actor: nothing more runs
        self._async_actor = False  # built on its loop (all its endpoints ``async``)
        self._host: Hosted | None = None
        # What runs now: the one-at-a-time message, since when (both set by whichever
        # thread runs it), the task that drains the queue while its head is ``async``;
        # concurrent ones by task (tasks of the actor's loop).
        self.current: Message | None = None
        self.since = 0.0
        # Since when the actor's __init__ runs (None once built): a timeout then says so.
        self.building_since: float | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._cancelling: Message | None = None
        self.concurrent: dict[Message, asyncio.Task[bool]] = {}
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._thread_main, name=name, daemon=True)
        self._thread.start()
        # The actor's own event loop and its thread, made on first need (under _lock).
        self._actor_loop: asyncio.AbstractEventLoop | None = None
        self._actor_thread: threading.Thread | None = None

    # -- the actor's loop ---------------------------------------------------------------

    def _actor(self) -> asyncio.AbstractEventLoop:
        """The actor's event loop, started on its own thread the first time (any thread).

        A system actor whose endpoints belong on the process' loop (``process_loop``, the
        RPC agent) uses that loop instead.
        """
        actor = self._actor_loop
        if actor is not None:
            return actor
        with self._lock:
            if self._actor_loop is None:
                if getattr(self._host, "process_loop", False):
                    self._actor_loop = self._loop
                else:
                    actor = self._new_loop()
                    thread = threading.Thread(
                        target=_run_loop, args=(actor,), name=f"{self._name} (loop)", daemon=True
                    )
                    self._actor_loop, self._actor_thread = actor, thread
                    thread.start()
            return self._actor_loop

    def _on_actor(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the actor's loop: now when called there, else soon."""
        actor = self._actor()
        if asyncio._get_running_loop() is actor:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: the actor is gone
            actor.call_soon_threadsafe(fn, *args)

    def _call_on_actor(self, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        """Run ``fn()`` on the actor's loop, awaiting it if it is a coroutine function,
        and return its value (blocks the calling thread, never the actor's loop; raises
        ``TimeoutError`` after ``timeout`` seconds)."""
        done: ConcurrentFuture[Any] = ConcurrentFuture()

        async def run() -> None:
            try:
                value = fn()
                if inspect.isawaitable(value):
                    value = await value
            except BaseException as error:
                done.set_exception(error)
            else:
                done.set_result(value)

        self._on_actor(lambda: self._actor().create_task(run()))
        return done.result(timeout)

    # -- building ------------------------------------------------------------------------

    def construct(
        self,
        factory: Callable[[], Hosted | BuildOnLoop],
        done: Callable[[BaseException | None], None],
    ) -> None:
        """Build the actor on its own thread (``__init__`` may block), then call ``done``.

        ``factory`` runs on the actor's thread; when it returns a ``BuildOnLoop``, its
        ``build`` runs on the actor loop's thread instead.
        """
        self._running = True  # messages wait until the actor exists
        self.building_since = time.monotonic()
        self._jobs.put((self._construct, factory, done))

    def _construct(
        self,
        factory: Callable[[], Hosted | BuildOnLoop],
        done: Callable[[BaseException | None], None],
    ) -> None:
        try:
            built = factory()
            if isinstance(built, BuildOnLoop):
                self._async_actor = True
                host = self._call_on_actor(built.build)
            else:
                host = built
        except BaseException as error:
            self._constructed(error, done)
            return
        with self._lock:
            self._host = host
            closed = self._closed
        if closed:
            # Stopped while it was being built (``close`` found no actor to close): its
            # close hooks run now, here, as they would have (in the actor's context).
            self._close_host(host, None)
        self._constructed(None, done)

    def _constructed(
        self, error: BaseException | None, done: Callable[[BaseException | None], None]
    ) -> None:
        """Hand the outcome of a build to the loop (actor's thread)."""
        try:
            self._loop.call_soon_threadsafe(self._after_construct, error, done)
        except RuntimeError:
            if not self._loop.is_closed():
                raise
            # The process is ending (its mesh was stopped while the actor was being
            # built): nobody waits for the outcome any more.

    def _after_construct(
        self, error: BaseException | None, done: Callable[[BaseException | None], None]
    ) -> None:
        self.building_since = None
        with self._lock:
            waiting, self._queue = self._queue, deque()
            if error is not None:
                self._closed = True
                waiting.extendleft(reversed(self._urgent))
                self._urgent.clear()
        if error is not None:
            # Messages that arrived while it was being built will never run: fail them.
            for message in waiting:
                message.fail_init(error)
            waiting.clear()
            self._jobs.put(_STOP)  # nothing will run on the actor's thread: it ends
            self._stop_actor_loop()
        done(error)
        host = self._host
        later: deque[Message] = deque()
        for message in waiting:
            # Calls to concurrent endpoints that came while it was being built start now,
            # as they would have on arrival; the others run in order.
            if host is not None and _kind_of(host, message.endpoint) is EndpointKind.CONCURRENT:
                self._start_concurrent(host, message)
            else:
                later.append(message)
        with self._lock:
            later.extend(self._queue)
            self._queue = later
        # Messages run from the next turn on: ``done`` answered the spawn with a frame
        # that leaves in a callback already queued, and the actor's thread must not run
        # a message (one that may end the process) before that answer is out. Until then
        # ``_running`` stays set, so arrivals only queue.
        self._loop.call_soon(self._start_after_construct)

    def _start_after_construct(self) -> None:
        with self._lock:
            self._running = False
        self._kick()

    # -- delivering ------------------------------------------------------------------------

    def deliver(self, message: Message) -> None:
        """Queue a message; call on the loop thread.

        A message marked ``urgent`` (a supervision event) does not wait behind the queued
        ones: on an actor whose endpoints are all ``async`` it runs at once, on its loop,
        beside the running endpoint (which may be waiting for it); on any other it runs
        next, once the running message is done.
        """
        if self._closed:
            from .._exceptions import MeshStoppedError

            message.fail(MeshStoppedError("the actor was stopped"))
            return
        host = self._host
        if host is not None and _kind_of(host, message.endpoint) is EndpointKind.CONCURRENT:
            # Concurrent endpoints skip the queue: they must answer even while the actor
            # is busy with a long message (a blocking ``def`` step, say).
            self._start_concurrent(host, message)
            return
        urgent = getattr(message, "urgent", False)
        if urgent and host is not None and self._async_actor:
            with self._lock:
                self._urgent_waiting += 1
            self._on_actor(self._start_urgent, host, message)
            return
        with self._lock:
            (self._urgent if urgent else self._queue).append(message)
            if self._running:
                return  # whoever drains the queue will come to it
        self._kick()

    def _start_urgent(self, host: Hosted, message: Message) -> None:
        # On the actor's loop: the urgent message runs as a task of its own.
        with self._lock:
            self._urgent_waiting -= 1
        try:
            args, kwargs = message.arguments()
        except BaseException as error:
            message.fail(error)
            return
        if _kind_of(host, message.endpoint) is EndpointKind.SYNC:
            self._run_sync(host, message, args, kwargs)  # a plain hook: here, at once
            return
        self._create_concurrent(host, message, args, kwargs)

    def halt(self) -> None:
        """The running endpoint ended the actor (any thread): no further message runs;
        ``close`` follows."""
        with self._lock:
            self._halted = True

    def _start_concurrent(self, host: Hosted, message: Message) -> None:
        try:
            args, kwargs = message.arguments()
        except BaseException as error:
            message.fail(error)
            return
        self._on_actor(self._create_concurrent, host, message, args, kwargs)

    def _create_concurrent(
        self, host: Hosted, message: Message, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        # On the actor's loop.
        task = asyncio.get_running_loop().create_task(
            self._run_async(host, message, args, kwargs), context=host.context
        )
        self._track(message, task)

    def _track(self, message: Message, task: asyncio.Task[bool]) -> None:
        self.concurrent[message] = task
        started = time.monotonic()

        def done(task: asyncio.Task[bool]) -> None:
            self.concurrent.pop(message, None)
            ok = not task.cancelled() and task.exception() is None and task.result()
            self._ran(message, ok, "concurrent", started)

        task.add_done_callback(done)

    def _kick(self) -> None:
        """Start draining the queue, if nobody does (loop thread)."""
        host = self._host
        with self._lock:
            if self._running or host is None or self._closed:
                return
            if not self._urgent and not self._queue:
                return
            self._running = True
            head = self._urgent[0] if self._urgent else self._queue[0]
        if _kind_of(host, head.endpoint) is EndpointKind.SYNC:
            self._jobs.put((self._drain_on_thread,))
        else:
            self._on_actor(self._start_drain_task)

    def _start_drain_task(self) -> None:
        # On the actor's loop.
        host = self._host
        assert host is not None
        self._drain_task = asyncio.get_running_loop().create_task(
            self._drain(), context=host.context
        )

    def _next(self, host: Hosted, on_thread: bool) -> tuple[Message, EndpointKind | None] | bool:
        """Take the head of the queue if it is this drainer's (``on_thread``: the actor's
        thread, which runs ``def`` endpoints; else the actor loop's task). Otherwise False
        when the queue is empty (nobody drains it from now on), True when its head is the
        other drainer's (the caller hands over)."""
        with self._lock:
            queue = self._urgent or self._queue
            if self._closed or self._halted or not queue:
                self._running = False
                return False
            message = queue[0]
            kind = _kind_of(host, message.endpoint)
            if kind is not None and (kind is EndpointKind.SYNC) != on_thread:
                return True
            queue.popleft()
            return message, kind

    async def _drain(self) -> None:
        host = self._host
        assert host is not None
        try:
            while not isinstance(taken := self._start_next(host, on_thread=False), bool):
                message, kind, args = taken
                ok: bool | None
                if kind is EndpointKind.ASYNC:
                    ok = await self._run_async(host, message, *args)
                else:
                    self._create_concurrent(host, message, *args)
                    ok = None  # counted when its task ends
                self._ran(message, ok, "async")
                if self._urgent_waiting:
                    # An urgent message waits on this loop behind endpoints that never
                    # yield: let it run before the next one.
                    await asyncio.sleep(0)
        except BaseException:
            with self._lock:
                self._running = False
            raise
        finally:
            self.current = None
        if taken:  # a ``def`` endpoint heads the queue: the actor's thread goes on
            self._jobs.put((self._drain_on_thread,))

    def _drain_on_thread(self) -> None:
        """Run the queue's ``def`` endpoints on the actor's thread, in order, until it is
        empty or an ``async`` one heads it (the actor loop's task takes over)."""
        host = self._host
        assert host is not None
        while not isinstance(taken := self._start_next(host, on_thread=True), bool):
            message, _, args = taken
            self._ran(message, self._run_sync(host, message, *args), "def")
        if taken:  # an ``async`` endpoint heads the queue: the actor loop's task goes on
            self._on_actor(self._start_drain_task)

    def _start_next(
        self, host: Hosted, on_thread: bool
    ) -> tuple[Message, EndpointKind | None, tuple[tuple[Any, ...], dict[str, Any]]] | bool:
        """``_next``, skipping messages whose arguments fail (their callers are told);
        the one returned is the running one from now on."""
        while not isinstance(taken := self._next(host, on_thread), bool):
            message, kind = taken
            args = self._arguments(host, message)
            if args is not None:
                self.current, self.since = message, time.monotonic()
                return message, kind, args
        return taken

    def _ran(
        self, message: Message, ok: bool | None, kind: str, started: float | None = None
    ) -> None:
        """``message``, a ``kind`` endpoint ("def", "async" or "concurrent"), is over:
        count it in the endpoint stats and the timeline, whichever are kept (one clock read
        for both; nothing when neither). ``started`` None: it is the one-at-a-time message,
        started at ``since``. ``ok`` None: counted elsewhere (when its task ends)."""
        if started is None:
            self.current = None
            started = self.since
        stats = self.stats
        if ok is None or (stats is None and not RECORDER.on):
            return
        ended = time.monotonic()
        if stats is not None:
            stats.record(message.endpoint, ended - started, ok)
        if RECORDER.on:
            RECORDER.ran(message, started, ended, ok, kind)

    @staticmethod
    def _arguments(host: Hosted, message: Message) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The message's arguments; None (the caller told) when they or it are unusable."""
        try:
            host.kind(message.endpoint)  # raises for a name that is no endpoint
            return message.arguments()
        except BaseException as error:
            message.fail(error)
            return None

    async def _run_async(
        self, host: Hosted, message: Message, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Run an ``async`` endpoint and answer; True when it returned, False if it raised."""
        token = CURRENT_MESSAGE.set(message)
        traced = _otel.run_started(message) if _otel.ACTIVE else None
        raised = True
        try:
            value = await host.invoke(message.endpoint, args, kwargs)
            raised = False
        except BaseException as error:
            if self._closed and isinstance(error, asyncio.CancelledError):
                from .._exceptions import MeshStoppedError

                # Cancelled because the actor is being dropped: its caller hears that.
                message.abandon(MeshStoppedError("the actor's mesh was stopped"))
                raise
            message.fail(error)
            if self._cancelling is message and isinstance(error, asyncio.CancelledError):
                # We cancelled the queue's task to stop this endpoint only: the queue goes on.
                self._cancelling = None
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                return False
            if not isinstance(error, Exception):
                raise
            return False
        finally:
            if traced is not None:
                _otel.run_ended(traced, message, not raised)
            CURRENT_MESSAGE.reset(token)
        message.succeed(value)
        return True

    @staticmethod
    def _run_sync(
        host: Hosted, message: Message, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Run a ``def`` endpoint and answer; True when it returned, False if it raised."""
        token = CURRENT_MESSAGE.set(message)
        traced = _otel.run_started(message) if _otel.ACTIVE else None
        ok = False
        try:
            value = host.invoke(message.endpoint, args, kwargs)
        except BaseException as error:
            message.fail(error)
        else:
            message.succeed(value)
            ok = True
        finally:
            if traced is not None:
                _otel.run_ended(traced, message, ok)
            CURRENT_MESSAGE.reset(token)
        return ok

    def _thread_main(self) -> None:
        # Jobs run in a copy of the actor's context (current actor, rank): a Context can be
        # entered by one thread at a time, and the loop's tasks use the original.
        context: contextvars.Context | None = None
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, *args = job
            if context is None and self._host is not None:
                context = self._host.context.copy()
            if context is None:
                fn(*args)
            else:
                context.run(fn, *args)

    @property
    def thread_id(self) -> int | None:
        """The actor's thread (where ``def`` endpoints run), for reading its stack."""
        return self._thread.ident

    @property
    def loop_thread_id(self) -> int | None:
        """The thread of the actor's loop (where ``async`` endpoints run), if it has one."""
        thread = self._actor_thread
        return thread.ident if thread is not None else None

    @property
    def drain_task(self) -> asyncio.Task[None] | None:
        """The task running the queue (and its ``async`` endpoints), if running."""
        task = self._drain_task
        return task if task is not None and not task.done() else None

    def queued(self) -> list[Message]:
        """Messages waiting their turn, in the order they will run."""
        with self._lock:
            return [*self._urgent, *self._queue]

    def cancel(self, match: Callable[[Message], bool]) -> int:
        """Cancel the messages ``match`` selects (loop thread); returns how many it reached.

        Queued ones are dropped (failed with ``CancelledError``); a running ``async`` endpoint
        has its task cancelled; a running ``def`` endpoint gets its ``cancelled`` flag set.
        """
        from asyncio import CancelledError

        reached = 0
        with self._lock:
            dropped = [m for m in self._queue if match(m)]
            for message in dropped:
                self._queue.remove(message)
        for message in dropped:
            message.cancelled = True
            message.fail(CancelledError("the caller cancelled the call before it started"))
            reached += 1
        for message, task in list(self.concurrent.items()):
            if match(message):
                message.cancelled = True
                self._on_actor(task.cancel)
                reached += 1
        current = self.current
        if current is not None and match(current):
            current.cancelled = True
            reached += 1
            host = self._host
            kind = host.kind(current.endpoint) if host is not None else None
            if kind is EndpointKind.ASYNC:
                self._on_actor(self._cancel_running, current)
        return reached

    def _cancel_running(self, message: Message) -> None:
        # On the actor's loop, where the drain task runs: if ``message`` is still the one
        # it runs (it may have finished since the CANCEL came), cancel it there.
        task = self._drain_task
        if self.current is message and task is not None and not task.done():
            self._cancelling = message
            task.cancel()

    def close(
        self,
        done: Callable[[], None] | None = None,
        error: BaseException | None = None,
        gone: BaseException | None = None,
    ) -> None:
        """Drop the actor: queued messages and the running one fail (the running one's
        callers at once), the threads end after the current job.

        The actor's running tasks are cancelled, then its close hooks run on its thread
        (after the ``def`` endpoint it is busy with, if any); ``done`` runs on the loop
        once they have. ``error``: why the actor is dropped (a failure rather than a
        stop), given to its ``__cleanup__``. ``gone``: what the callers of the messages it
        drops get, as it is (the error later calls to the dropped actor get); by default a
        ``MeshStoppedError``.
        """
        from .._exceptions import MeshStoppedError

        with self._lock:
            self._closed = True
            dropped, self._queue = self._queue, deque()
            self._urgent.clear()  # supervision events of an actor that is going: dropped
            host = self._host  # (None while it is built: ``_construct`` closes it then)
        why = "the actor's mesh was stopped"
        if error is not None:  # in Monarch's words (programs match on them), then ours
            why = f"The {self._name} and all its descendants have failed: {error}"
        running = self.current
        if running is not None:
            # Its caller hears of the stop now, not when (or if) a ``def`` endpoint it is
            # in returns: a thread cannot be interrupted, and the mesh is gone for callers.
            # What the endpoint answers later is dropped (a message answers once).
            dropped.append(running)
        for message in dropped:
            if gone is not None:
                message.abandon(gone, as_sent=True)
            else:
                message.abandon(MeshStoppedError(why))
        self._jobs.put((self._finish, host, error, done))
        self._jobs.put(_STOP)

    def _finish(
        self, host: Hosted | None, error: BaseException | None, done: Callable[[], None] | None
    ) -> None:
        # On the actor's thread, after its current job: the running tasks end first (a
        # concurrent endpoint sees CancelledError before __cleanup__ runs), then the hooks.
        if self._actor_loop is not None:
            with contextlib.suppress(Exception):
                self._call_on_actor(self._cancel_tasks)
        if host is not None:
            try:
                self._close_host(host, error)
            except Exception:
                log.exception("closing actor %s failed", self._name)
        self._stop_actor_loop()
        if done is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: the process is ending
                self._loop.call_soon_threadsafe(done)

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in (*self.concurrent.values(), self._drain_task) if t is not None]
        tasks = [t for t in tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_CANCEL_WAIT)

    def _close_host(self, host: Hosted, error: BaseException | None) -> None:
        """Run the actor's close hooks here (its thread), in its context; an ``async``
        ``__cleanup__`` runs on its loop."""

        def on_loop(fn: Callable[[], Any]) -> Any:
            return self._call_on_actor(lambda: host.context.run(fn), _CLEANUP_WAIT)

        host.context.copy().run(host.close, error, on_loop)

    def _stop_actor_loop(self) -> None:
        actor = self._actor_loop
        if actor is not None and self._actor_thread is not None:  # its own, not the process'
            with contextlib.suppress(RuntimeError):  # closed already
                actor.call_soon_threadsafe(actor.stop)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """An actor's loop thread: run ``loop`` until stopped, then close it."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        leftover = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(asyncio.wait(leftover, timeout=_CANCEL_WAIT))
        loop.close()


def _kind_of(host: Hosted, endpoint: str) -> EndpointKind | None:
    """How ``endpoint`` runs; None when it is no endpoint (reported in its turn)."""
    try:
        return host.kind(endpoint)
    except Exception:
        return None
