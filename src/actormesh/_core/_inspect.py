"""What an actor is doing, for the error of a caller that timed out.

When a wait runs out, the caller asks each process that owes it an answer (an INSPECT
envelope, answered on that process' loop) what the actors concerned are doing about its
request: running it (which endpoint, for how long, and the Python stack: the actor
thread's for ``def`` endpoints, read with ``sys._current_frames()``, the task's for
``async`` ones), or still queued behind another message (and what that one is doing).
``describe`` builds that answer from a mailbox; ``explain`` words it on the caller's side.
Both sides deal in plain dicts, so the answer pickles without any of the actor's objects.

``thread_stacks`` and ``task_stack`` read every thread's stack and a task's awaited
coroutines, for ``actormesh stacks`` (see ``_snapshot``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from ._mailbox import Mailbox, Message

__all__ = ["describe", "explain", "task_stack", "thread_stacks"]

_STACK_LIMIT = 12  # innermost frames shown per stack


def describe(mailbox: Mailbox, mine: Callable[[Message], bool]) -> dict[str, Any]:
    """What ``mailbox``'s actor is doing about the message ``mine`` selects (loop thread)."""
    now = time.monotonic()
    for message, task in list(mailbox.concurrent.items()):
        if mine(message):
            return {
                "state": "running",
                "endpoint": message.endpoint,
                "seconds": None,
                "stack": _task_stack(task),
            }
    current = mailbox.current
    busy = None
    if current is not None:
        busy = {
            "endpoint": current.endpoint,
            "seconds": now - mailbox.since,
            "stack": _current_stack(mailbox),
        }
        if mine(current):
            return {"state": "running", **busy}
    elif mailbox.building_since is not None:
        busy = {
            "endpoint": "__init__",
            "seconds": now - mailbox.building_since,
            "stack": _current_stack(mailbox),
        }
    queued = mailbox.queued()
    for ahead, message in enumerate(queued):
        if mine(message):
            return {"state": "queued", "ahead": ahead, "busy": busy}
    return {"state": "absent", "busy": busy}


def _current_stack(mailbox: Mailbox) -> str:
    task = mailbox.drain_task
    thread = mailbox.thread_id
    frame = sys._current_frames().get(thread) if thread is not None else None
    if frame is not None and not _idle(frame):
        return _format(traceback.extract_stack(frame))
    if task is not None:
        return _task_stack(task)
    return ""


def _idle(frame: FrameType) -> bool:
    # Between jobs the actor's thread waits for the next one in its main function.
    return frame.f_code.co_name == "_thread_main"


def task_stack(task: asyncio.Task[Any], limit: int = _STACK_LIMIT) -> str:
    """The awaited coroutines of ``task``, outermost first, formatted (library frames
    above the endpoint left out); empty when it awaits only the runtime's own code (the
    task of a ``def`` endpoint, which waits for the actor's thread)."""
    return _task_stack(task, limit, user_only=True)


def thread_stacks(limit: int = 40) -> list[dict[str, Any]]:
    """Every thread of this process: ``ident``, ``name``, ``stack`` (formatted, library
    frames above the first frame of user code left out) and ``ours`` (True when every
    frame is the runtime's own or the standard library's: a runtime thread, or an idle one).
    """
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = []
    for ident, frame in sys._current_frames().items():
        summary = traceback.extract_stack(frame)
        ours = all(_is_ours(f.filename) for f in summary)
        found.append(
            {
                "ident": ident,
                "name": names.get(ident, f"thread {ident}"),
                "stack": _format(summary, limit),
                "ours": ours,
            }
        )
    return found


def _task_stack(task: asyncio.Task[Any], limit: int = _STACK_LIMIT, user_only: bool = False) -> str:
    # A suspended coroutine's frame has no f_back: follow what each one awaits instead.
    frames: list[FrameType] = []
    coro: Any = task.get_coro()
    while coro is not None and len(frames) < 64:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    summary = traceback.StackSummary.extract((f, f.f_lineno) for f in frames)
    if user_only and all(_is_ours(f.filename) for f in summary):
        return ""
    return _format(summary, limit)


_LIBRARY = os.path.dirname(os.path.dirname(__file__))
_STDLIB = os.path.dirname(threading.__file__)  # threading, selectors, concurrent, ...


def _is_ours(filename: str) -> bool:
    # The runtime's frames, and the standard library's (not the packages installed in it).
    if filename.startswith((_LIBRARY, "<frozen ")):
        return True  # actormesh, or a frozen module of the standard library
    return filename.startswith(_STDLIB) and "-packages" not in filename


def _format(summary: traceback.StackSummary, limit: int = _STACK_LIMIT) -> str:
    # Start at the endpoint: the runtime's frames above it say nothing about the actor.
    frames = list(summary)
    first = next((i for i, f in enumerate(frames) if not _is_ours(f.filename)), 0)
    return "".join(traceback.StackSummary.from_list(frames[first:]).format()[-limit:])


def explain(point: str, answer: dict[str, Any] | None, endpoint: str) -> str:
    """One actor's line(s) in a timeout message, from ``describe``'s answer (or ``None``)."""
    if answer is None:
        return (
            f"{point}: its process did not answer in time (its event loop is blocked: a "
            "C call holding the GIL)"
        )
    state = answer["state"]
    if state == "running":
        since = f" for {answer['seconds']:.1f} s" if answer.get("seconds") is not None else ""
        return f"{point}: running '{answer['endpoint']}'{since}{_stack(answer.get('stack'))}"
    busy = answer.get("busy")
    doing = (
        f"; the actor is busy with '{busy['endpoint']}' (running for {busy['seconds']:.1f} s)"
        f"{_stack(busy.get('stack'))}"
        if busy
        else ""
    )
    if state == "queued":
        ahead = answer["ahead"]
        waiting = f"{ahead} other message(s) ahead of it" if ahead else "next in line"
        return f"{point}: the call to '{endpoint}' is queued, {waiting}{doing}"
    return f"{point}: the call is not in the actor's queue (not arrived, or answered){doing}"


def _stack(text: str | None) -> str:
    if not text:
        return ""
    lines = "\n".join("      " + line for line in text.rstrip().splitlines())
    return f"; Python stack (most recent call last):\n{lines}"
