"""``Future``: the result of every adverb, usable from sync code, asyncio and Jupyter.

``await fut`` suspends only the awaiting task; ``fut.get(timeout)`` blocks the calling
thread. Results are set by the runtime's loop thread; a waiter on another event loop is
woken with ``call_soon_threadsafe``, a blocked thread by releasing a lock. ``get`` on the
runtime's own loop thread raises: it would wait for the thread it blocks.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future as ConcurrentFuture
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._exceptions import CallTimeoutError

if TYPE_CHECKING:
    from .._core import ReplyRoute

__all__ = ["Future", "from_concurrent"]

R = TypeVar("R")
_PENDING, _DONE, _FAILED = 0, 1, 2

# A deferred future's ``_defer`` once its work has started, when the work is shared by
# every observer (a ``@returns_future`` body): an observer's cancelled ``await`` then
# leaves the work alone.
SHARED: Any = object()


class Deferred(Protocol):
    """Work a future starts when it is first observed (see the module docstring)."""

    # What the future's ``_defer`` becomes once the work has started: ``None`` (a
    # cancelled ``await`` cancels the future, as for a call) or ``SHARED``.
    claimed: Any

    def start(self, future: Future[Any], loop: asyncio.AbstractEventLoop | None) -> None:
        """Start for an ``await`` on ``loop`` (or a callback: the running loop, if any)."""

    def drive(self, future: Future[Any], timeout: float | None) -> None:
        """Start for a blocking ``get(timeout)``; may do the work on this thread."""


class Future(Generic[R]):
    """The eventual result of a call. Users get these from adverbs; never build one."""

    __slots__ = (
        "__weakref__",
        "_callbacks",
        "_defer",
        "_lock",
        "_loop_thread",
        "_on_cancel",
        "_on_timeout",
        "_route",
        "_spin",
        "_state",
        "_value",
    )

    _state: int
    _value: Any
    _callbacks: list[Callable[[Future[R]], None]]
    _lock: threading.Lock
    _loop_thread: Callable[[], bool] | None
    _on_timeout: Callable[[float | None], BaseException] | None
    _on_cancel: Callable[[], None] | None
    _route: ReplyRoute | None
    _spin: bool
    _defer: Any

    def __init__(self) -> None:
        raise TypeError(
            "Future objects are returned by Monarch operations (actormesh's calls, ports "
            "and adverbs) and cannot be constructed directly."
        )

    @classmethod
    def _new(
        cls,
        loop_thread: Callable[[], bool] | None = None,
        on_timeout: Callable[[float | None], BaseException] | None = None,
        on_cancel: Callable[[], None] | None = None,
        route: ReplyRoute | None = None,
        spin: bool = False,
        defer: Deferred | None = None,
    ) -> Future[Any]:
        """A pending future (the runtime's constructor).

        Args:
            loop_thread: true on the thread whose loop resolves it (``get`` refuses there).
            on_timeout: the error of a ``get`` that ran out (it may ask the actors).
            on_cancel: called by ``cancel()``.
            route: the reply route of a call made on a foreign loop.
            spin: a wait polls the route briefly before sleeping.
            defer: work to start when the future is first observed.
        """
        self: Future[Any] = _new_object(cls)
        self._state = _PENDING
        self._value = None
        self._callbacks = []
        self._lock = threading.Lock()
        self._loop_thread = loop_thread
        self._on_timeout = on_timeout
        self._on_cancel = on_cancel
        # The event loop that reads this call's replies, when it was made on one (see
        # actormesh._core._reply_routes): a blocking wait on that loop's thread reads it.
        self._route = route
        # Whether a wait polls the route briefly before sleeping (Config.reply_spin): for
        # a call that waits on one process only.
        self._spin = spin
        self._defer = defer
        return self

    def _claim(self) -> Deferred | None:
        """The deferred work, for its first observer only (``None`` for the others)."""
        with self._lock:
            deferred = self._defer
            if deferred is None or deferred is SHARED or self._state != _PENDING:
                return None
            self._defer = deferred.claimed
        return deferred  # type: ignore[no-any-return]

    # -- resolution (runtime side) ------------------------------------------------------

    def _set_result(self, value: R) -> bool:
        return self._finish(_DONE, value)

    def _set_exception(self, error: BaseException) -> bool:
        """Fail the future; False if it was done already (the first outcome wins)."""
        return self._finish(_FAILED, error)

    def _finish(self, state: int, value: Any) -> bool:
        """Set the outcome; False if one was set already (the first wins)."""
        with self._lock:
            if self._state != _PENDING:
                return False  # first outcome wins (a late reply after a timeout, say)
            self._state, self._value = state, value
            callbacks, self._callbacks = self._callbacks, []
            # The hooks point back at the request that owns this future: dropping them
            # breaks the cycle, so a result (and the shared memory under it) is freed as
            # soon as the caller lets go of it, not at the next garbage collection.
            self._on_timeout = self._on_cancel = None
            route, self._route = self._route, None
        for callback in callbacks:
            callback(self)
        if route is not None:
            route.end()
        return True

    # -- inspection ---------------------------------------------------------------------

    def done(self) -> bool:
        """True once a value or an error is set."""
        return self._state != _PENDING

    def result(self, timeout: float | None = None) -> R:
        """``get(timeout)``: wait for the value (or raise the error), as
        ``concurrent.futures`` and Monarch's futures do."""
        return self.get(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait (as ``get``), then the error if the call failed, else ``None``.

        Raises:
            CallTimeoutError: not done within ``timeout`` seconds.
        """
        if self._state == _PENDING:
            try:
                self.get(timeout)
            except CallTimeoutError:
                if self._state == _PENDING:
                    raise
            except BaseException:
                pass  # the error is what this returns, below
        return self._value if self._state == _FAILED else None

    def as_asyncio(self) -> asyncio.Future[R]:
        """An ``asyncio.Future`` of the running loop that completes with this one."""
        loop = asyncio.get_running_loop()
        mirror: asyncio.Future[R] = loop.create_future()

        def settle(done: Future[R]) -> None:
            if mirror.done():
                return
            if done._state == _DONE:
                mirror.set_result(done._value)
            else:
                mirror.set_exception(done._value)

        def relay(done: Future[R]) -> None:
            loop.call_soon_threadsafe(settle, done)

        self.add_done_callback(relay)
        return mirror

    def _value_now(self) -> R:
        """The value of a done future (or its error raised)."""
        if self._state == _DONE:
            return self._value  # type: ignore[no-any-return]
        raise self._value

    def add_done_callback(self, fn: Callable[[Future[R]], None]) -> None:
        """Call ``fn(self)`` when done (at once if already done), on the resolving thread.

        It observes the future: deferred work starts (on the running event loop, if any).
        """
        if self._defer is not None:
            deferred = self._claim()
            if deferred is not None:
                deferred.start(self, asyncio._get_running_loop())
        route = self._route
        if route is not None:
            route.foreign_waiter()  # a thread's route: read by the runtime from now on
        self._add_callback(fn)

    def _add_callback(self, fn: Callable[[Future[R]], None]) -> None:
        with self._lock:
            if self._state == _PENDING:
                self._callbacks.append(fn)
                return
        fn(self)

    # -- waiting ------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> R:
        """Block until done and return the value (or raise the error).

        Args:
            timeout: seconds to wait. On expiry ``CallTimeoutError`` (a ``TimeoutError``)
                says what was pending, and the call goes on, as with
                ``concurrent.futures``: a later ``get()`` may still return its value.
                ``cancel()`` gives it up. The exception is the ``get()`` that runs a
                ``@returns_future`` body (its first observer): its expiry cancels the
                body, which fails with ``CallTimeoutError`` for every observer.

        Raises:
            RuntimeError: called on the event-loop thread that resolves the future (the
                runtime's, in a done callback say; or the one running a returns_future
                body), where blocking would deadlock: use ``await`` there.
        """
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int | float):
                raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
            if timeout < 0:
                raise ValueError(f"invalid timeout {timeout!r}: it must be >= 0, or None to wait")
        if self._state == _PENDING:
            if self._loop_thread is not None and self._loop_thread():
                raise RuntimeError(
                    "Future.get() called on the event-loop thread that resolves it "
                    "(actormesh's, or the loop running its returns_future body), where it "
                    "would deadlock; use `await future` there"
                )
            if self._defer is not None:
                deferred = self._claim()
                if deferred is not None:
                    deferred.drive(self, timeout)
                    if self._state != _PENDING:
                        return self._value_now()
            route = self._route
            if route is not None:
                route.check_orphaned()
                if route.must_pump():
                    started = time.monotonic()
                    if route.pump(self.done, timeout, self._spin) or self._state != _PENDING:
                        if self._state == _PENDING:
                            raise self._timed_out(timeout)
                        return self._value_now()
                    # Handed to the runtime meanwhile: wait for it to read, below.
                    if timeout is not None:
                        timeout = max(timeout - (time.monotonic() - started), 0)
                else:
                    route.foreign_waiter()  # another thread's route: it may never pump
            waiter = threading.Lock()
            waiter.acquire()
            self._add_callback(lambda _: waiter.release())
            ready = waiter.acquire(timeout=-1 if timeout is None else max(timeout, 0))
            if not ready and self._state == _PENDING:
                raise self._timed_out(timeout)
        return self._value_now()

    def _timed_out(self, timeout: float | None) -> CallTimeoutError:
        """The error of a wait that ran out (the call itself goes on)."""
        on_timeout = self._on_timeout
        if on_timeout is not None:
            error = on_timeout(timeout)  # may ask the actors what they are doing
            if isinstance(error, CallTimeoutError):
                return error
        return CallTimeoutError(f"timed out after {timeout:g} s")

    async def wait(self, timeout: float | None = None) -> R:
        """``await`` with a timeout: the value, or ``CallTimeoutError`` as ``get`` raises it
        (the call goes on; a later wait may still get its value).

        ``asyncio.wait_for(future, t)`` works too (it cancels the call on expiry and raises
        a plain ``TimeoutError``); this one says which actors had not answered and what
        each was doing.
        """
        route = self._route
        if route is not None:
            route.check_orphaned()
        if self._state == _PENDING and timeout is not None:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            self.add_done_callback(lambda f: _wake_threadsafe(loop, waiter, f))
            try:
                await asyncio.wait_for(waiter, max(timeout, 0))
            except TimeoutError:
                if self._state == _PENDING:
                    # Asking the actors blocks briefly: not on this (maybe the runtime's) loop.
                    raise await asyncio.to_thread(self._timed_out, timeout) from None
        return await self

    def cancel(self) -> bool:
        """Abandon the call: waiters get ``asyncio.CancelledError``; True if it was pending."""
        if self._state != _PENDING:
            return False
        on_cancel = self._on_cancel
        self._finish(_FAILED, asyncio.CancelledError("the call was cancelled"))
        if on_cancel is not None:
            on_cancel()
        return True

    def cancelled(self) -> bool:
        """True if ``cancel()`` ended it."""
        return self._state == _FAILED and isinstance(self._value, asyncio.CancelledError)

    def __await__(self) -> Generator[Any, None, R]:
        if self._state == _PENDING:
            if self._defer is not None:
                deferred = self._claim()
                if deferred is not None:
                    deferred.start(self, asyncio.get_running_loop())
                    if self._state != _PENDING:
                        return self._value_now()
            route = self._route
            if route is not None:
                route.check_orphaned()
                if self._spin:
                    route.poll_briefly(self.done)  # a quick reply is read before yielding
                    if self._state != _PENDING:
                        return self._value_now()
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            if self._loop_thread is not None and self._loop_thread():
                self.add_done_callback(lambda f: _wake(waiter, f))
            else:
                self.add_done_callback(lambda f: _wake_threadsafe(loop, waiter, f))
            try:
                yield from waiter.__await__()
            except asyncio.CancelledError:
                if self._defer is not SHARED:  # shared work outlives one observer
                    self.cancel()
                raise
        return self._value_now()

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _DONE: "done", _FAILED: "failed"}[self._state]
        return f"<actormesh.Future {state}>"


def _wake(waiter: asyncio.Future[None], _: Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)


# Waiters on other event loops, woken in batches: one thread-safe call per loop per burst
# of results instead of one per result (each costs a system call to wake that loop).
_wakes: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
_wakes_lock = threading.Lock()


def _wake_threadsafe(
    loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None], f: Future[Any]
) -> None:
    if asyncio._get_running_loop() is loop:
        # Resolved on the waiter's own loop (its reply route read the answer): no wake-up.
        if not waiter.done():
            waiter.set_result(None)
        return
    with _wakes_lock:
        batch = _wakes.get(loop)
        if batch is not None:
            batch.append(waiter)
            return
        _wakes[loop] = [waiter]
    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(_wake_batch, loop)
        except RuntimeError:  # closed meanwhile: nobody is waiting any more
            with _wakes_lock:
                _wakes.pop(loop, None)


def _wake_batch(loop: asyncio.AbstractEventLoop) -> None:
    with _wakes_lock:
        batch = _wakes.pop(loop, [])
    for waiter in batch:
        if not waiter.done():
            waiter.set_result(None)


def resolved(value: R) -> Future[R]:
    """A future that is already done (for adverbs answered without I/O)."""
    future: Future[R] = Future._new()
    future._set_result(value)
    return future


_new_object = object.__new__

Future.__module__ = "actormesh"


class _Loop(Protocol):
    """What ``from_concurrent`` needs of a runtime."""

    def in_loop_thread(self) -> bool: ...


def _cancel(inner: ConcurrentFuture[Any]) -> None:
    inner.cancel()


def from_concurrent(runtime: _Loop, inner: ConcurrentFuture[R]) -> Future[R]:
    """An actormesh ``Future`` that follows a ``concurrent.futures.Future`` (work the
    runtime's loop does for a caller: a spawn, a stop, a group's setup)."""
    future: Future[R] = Future._new(runtime.in_loop_thread, on_cancel=lambda: _cancel(inner))

    def copy(done: ConcurrentFuture[R]) -> None:
        if done.cancelled():
            future._set_exception(asyncio.CancelledError())
        elif done.exception() is not None:
            future._set_exception(done.exception())  # type: ignore[arg-type]
        else:
            future._set_result(done.result())

    inner.add_done_callback(copy)
    return future
