"""``@returns_future``: an ``async def`` whose call gives a ``Future``, run where the
Future is first observed (Monarch 0.7's semantics).

Calling the decorated function starts nothing: it makes sure this process has its
runtime (as Monarch's ``context()`` does), copies the caller's context variables and
returns a deferred ``Future`` (``_future.Deferred``). Its first observer runs the body:

- ``await`` / ``as_asyncio()`` (or ``add_done_callback`` on a running loop): a task on
  that loop, held until it finishes (asyncio holds tasks only weakly). A cancelled
  ``await`` cancels that observer only; the body goes on for the others.
- ``get(timeout)`` on a thread without a running loop: the calling thread's own event
  loop runs it until it finishes, as ``asyncio.run`` does (the tasks it leaves are
  cancelled before ``get`` returns). The loop is made on the thread's first such
  ``get``, reused by later ones (its default executor and async generators live on),
  and shut down when the thread exits. If ``timeout`` expires, or the wait is
  interrupted (``KeyboardInterrupt``), the Future fails (``CallTimeoutError``,
  ``CancelledError``) *before* the body is cancelled and its cleanup run, so whatever
  the body does while cancelled cannot replace that outcome.
- ``get()`` on a thread that runs a loop already (an ``async def`` calling sync code):
  the same, on a short-lived helper thread with a loop of its own.
- ``add_done_callback`` off any loop: a helper thread runs it, unwaited.

Every later observer waits for the same outcome; its own timeout or cancellation leaves
the body alone. A Future dropped unobserved closes its coroutine unstarted: none of the
body runs (and Python does not warn that it was never awaited). ``Future.cancel()``
cancels the body, or closes it unstarted.

Side effects meant to happen at the call (sending messages, say) belong in a plain
function that calls the decorated one, so they happen even if nobody observes the Future.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from .._exceptions import CallTimeoutError
from .._hosts import Runtime
from ._future import SHARED, Future

__all__ = ["returns_future"]

P = ParamSpec("P")
T = TypeVar("T")

# Every started body task, until it finishes (asyncio keeps only weak references).
_running: set[asyncio.Task[Any]] = set()

# The loops a forked child inherited from its parent: kept open (closing one would
# unregister the parent's descriptors from the epoll instance they share).
_INHERITED: list[asyncio.AbstractEventLoop] = []

# Each thread's own loop (a ``_ThreadLoop``), for the ``get()`` that runs a body.
_THIS_THREAD = threading.local()


def returns_future(function: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Future[T]]:
    """Make an ``async def`` return an actormesh ``Future`` (``.get()`` or ``await`` it).

    The body runs when the Future is first observed, where it is observed (see the
    module docstring): ``await`` runs it on the awaiting loop, ``get()`` on the calling
    thread's own loop (its timeout cancels the body). Nothing runs for a Future that is
    never observed.

    Raises:
        TypeError: ``function`` is not an ``async def``.
    """
    if not inspect.iscoroutinefunction(function):
        raise TypeError("returns_future requires an async function")

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Future[T]:
        coro = function(*args, **kwargs)
        try:
            runtime = Runtime.get()  # this process's runtime, made here, not in a body
            body = _Body(coro, contextvars.copy_context())
        except BaseException:
            coro.close()
            raise
        # Until the body starts, a get() on the runtime's loop thread is refused: the
        # body's awaits of calls need that thread (a started body's loop replaces it).
        return Future._new(runtime.in_loop_thread, on_cancel=body.cancel, defer=body)

    return wrapper


class _Body:
    """A returns_future call's coroutine, run for its Future's first observer
    (``_future.Deferred``)."""

    __slots__ = ("coro", "ctx", "lock", "loop", "task")
    claimed = SHARED  # the observers share the body: a cancelled await cancels only itself

    def __init__(self, coro: Coroutine[Any, Any, Any], ctx: contextvars.Context) -> None:
        self.coro: Coroutine[Any, Any, Any] | None = coro
        self.ctx = ctx
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None

    def __del__(self) -> None:
        # Closing an unstarted coroutine runs none of its code (and Python does not warn
        # that it was never awaited).
        coro = self.coro
        if coro is not None:
            coro.close()

    def _take(self) -> Coroutine[Any, Any, Any] | None:
        with self.lock:
            coro, self.coro = self.coro, None
        return coro

    def cancel(self) -> None:
        """``Future.cancel()``: close the body unstarted, or cancel its task."""
        coro = self._take()
        if coro is not None:
            coro.close()
            return
        task, loop = self.task, self.loop
        if task is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: it has finished
                loop.call_soon_threadsafe(task.cancel)

    # -- observers ----------------------------------------------------------------------

    def start(self, future: Future[Any], loop: asyncio.AbstractEventLoop | None) -> None:
        """The first observer awaits (or adds a callback): a task on its loop."""
        coro = self._take()
        if coro is None:
            return  # cancelled meanwhile
        if loop is not None:
            self._start(future, coro, loop)
            return
        # A callback added off any loop: a helper thread runs the body, unwaited.
        helper = threading.Thread(
            target=self._run_detached, args=(future, coro), name="returns_future", daemon=True
        )
        try:
            helper.start()
        except BaseException as exc:
            coro.close()
            future._set_exception(_shared(exc))
            raise

    def drive(self, future: Future[Any], timeout: float | None) -> None:
        """The first observer calls ``get(timeout)``: run the body on this thread's loop
        (a helper's if this thread runs a loop already) until it ends or time is up."""
        coro = self._take()
        if coro is None:
            return  # cancelled meanwhile
        if asyncio._get_running_loop() is not None:
            self._drive_on_helper(future, coro, timeout)
            return
        try:
            loop = _thread_loop()
        except BaseException as exc:
            coro.close()
            future._set_exception(_shared(exc))
            raise
        try:
            task = self._start(future, coro, loop)
            try:
                done, _ = loop.run_until_complete(asyncio.wait({task}, timeout=timeout))
            except BaseException:  # interrupted: the body is cancelled, then this raises
                _cancel(loop, task, future, asyncio.CancelledError("get() was interrupted"))
                raise
            if not done:
                _cancel(loop, task, future, _timed_out(timeout))
        finally:
            try:
                _cancel_leftovers(loop)
            except BaseException:
                _THIS_THREAD.loop = None  # a loop whose cleanup broke is not reused
                raise

    # -- running ------------------------------------------------------------------------

    def _start(
        self, future: Future[Any], coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Task[Any]:
        """The body as a task of ``loop`` (it runs in the caller's context copy), whose
        outcome is the future's."""
        try:
            task = loop.create_task(coro, context=self.ctx)
        except BaseException as exc:
            coro.close()
            future._set_exception(_shared(exc))
            raise
        self.loop, self.task = loop, task
        # A blocking get() on the thread running this loop would stop the body: refused.
        future._loop_thread = functools.partial(_runs, loop)
        task.add_done_callback(functools.partial(_publish, future))
        _running.add(task)
        task.add_done_callback(_running.discard)
        return task

    def _run_detached(self, future: Future[Any], coro: Coroutine[Any, Any, Any]) -> None:
        """A helper thread's work for an observer on no loop: run the body, shut down."""
        try:
            loop = asyncio.new_event_loop()
        except BaseException as exc:
            coro.close()
            future._set_exception(_shared(exc))
            return
        try:
            task = self._start(future, coro, loop)
            loop.run_until_complete(asyncio.wait({task}))
        except BaseException as exc:  # the body's outcome is the future's; this is not
            future._set_exception(_shared(exc))
        finally:
            _close(loop)

    def _drive_on_helper(
        self, future: Future[Any], coro: Coroutine[Any, Any, Any], timeout: float | None
    ) -> None:
        """As ``drive``, on a short-lived thread with a loop of its own (this thread
        runs a loop already, which cannot run another); waits for that loop's shutdown."""
        try:
            loop = asyncio.new_event_loop()
        except BaseException as exc:
            coro.close()
            future._set_exception(_shared(exc))
            raise
        started, finished = threading.Event(), threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["task"] = task = self._start(future, coro, loop)
                started.set()
                try:
                    loop.run_until_complete(asyncio.wait({task}))
                except BaseException:
                    _cancel(loop, task, future, asyncio.CancelledError())
                    raise
            except BaseException as exc:
                box.setdefault("error", exc)
            finally:
                started.set()
                try:
                    _close(loop)
                finally:
                    finished.set()

        helper = threading.Thread(target=run, name="returns_future", daemon=True)
        try:
            helper.start()
        except BaseException as exc:
            if not started.is_set():  # it never ran: the body is closed unstarted
                loop.close()
                coro.close()
            future._set_exception(_shared(exc))
            raise
        try:
            finished.wait(timeout)
        except BaseException:  # interrupted: cancel the body, wait for its cleanup
            self._stop_helper(future, started, finished, box, asyncio.CancelledError())
            raise
        if not finished.is_set():
            self._stop_helper(future, started, finished, box, _timed_out(timeout))
        error = box.get("error")
        if error is not None and not isinstance(error, Exception):
            raise error  # an interrupt in the body

    def _stop_helper(
        self,
        future: Future[Any],
        started: threading.Event,
        finished: threading.Event,
        box: dict[str, Any],
        outcome: BaseException,
    ) -> None:
        """Fail the future with ``outcome`` (unless the body finished first), cancel the
        helper's body and wait for the helper to end."""
        if future._set_exception(outcome):
            started.wait()
            task = box.get("task")
            if task is not None:
                with contextlib.suppress(RuntimeError):  # closed: the body has finished
                    task.get_loop().call_soon_threadsafe(task.cancel)
        finished.wait()


def _runs(loop: asyncio.AbstractEventLoop) -> bool:
    """True on the thread running ``loop``."""
    return asyncio._get_running_loop() is loop


def _publish(future: Future[Any], task: asyncio.Task[Any]) -> None:
    """The finished body's outcome is the future's (unless one was set first)."""
    if task.cancelled():
        future._set_exception(asyncio.CancelledError("the returns_future body was cancelled"))
        return
    error = task.exception()
    if error is not None:
        future._set_exception(error)
    else:
        future._set_result(task.result())


def _shared(exc: BaseException) -> BaseException:
    """What the other observers get when starting the body failed: the error itself, or
    ``CancelledError`` for an interrupt (which only the interrupted thread raises)."""
    return exc if isinstance(exc, Exception) else asyncio.CancelledError()


def _timed_out(timeout: float | None) -> CallTimeoutError:
    return CallTimeoutError(
        f"the returns_future body did not finish within {timeout:g} s, and was cancelled"
    )


def _cancel(
    loop: asyncio.AbstractEventLoop,
    task: asyncio.Task[Any],
    future: Future[Any],
    outcome: BaseException,
) -> None:
    """Fail the future with ``outcome``, then cancel the body and run its cleanup."""
    future._set_exception(outcome)
    task.cancel()
    loop.run_until_complete(asyncio.wait({task}))


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a body left running and run them to their end, as
    ``asyncio.run`` does."""
    leftovers = asyncio.all_tasks(loop)
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.wait(leftovers))
    for task in leftovers:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception during returns_future shutdown",
                    "exception": task.exception(),
                    "task": task,
                }
            )


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Shut a loop down as ``asyncio.run`` does."""
    try:
        _cancel_leftovers(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


class _ThreadLoop:
    """A thread's own loop, reused by each ``get()`` that runs a body on that thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()

    def __del__(self) -> None:
        # Runs on the thread as it exits (its thread-local data goes). At interpreter
        # shutdown no thread can be started to shut the executor down: only closed.
        if getattr(self, "pid", None) != os.getpid():
            _INHERITED.append(self.loop)  # a forked child's copy of its parent's loop
            return
        try:
            if not sys.is_finalizing():
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop: made on first use, and again in a forked child."""
    current: _ThreadLoop | None = getattr(_THIS_THREAD, "loop", None)
    if current is None or current.pid != os.getpid() or current.loop.is_closed():
        current = _THIS_THREAD.loop = _ThreadLoop()
    return current.loop
