"""What an actor is doing, for the error of a caller that timed out.

When a wait runs out, the caller asks each process that owes it an answer (an INSPECT
envelope, answered on that process' loop) what the actors concerned are doing about its
request: running it (which endpoint, for how long, and the Python stack: the actor
thread's for ``def`` endpoints, read with ``sys._current_frames()``, the task's for
``async`` ones), or still queued behind another message (and what that one is doing).
``describe`` builds that answer from a mailbox; ``explain`` words it on the caller's side.
Both sides deal in plain dicts, so the answer pickles without any of the actor's objects.
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

__all__ = ["describe", "explain"]

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


def _task_stack(task: asyncio.Task[Any]) -> str:
    # A suspended coroutine's frame has no f_back: follow what each one awaits instead.
    frames: list[FrameType] = []
    coro: Any = task.get_coro()
    while coro is not None and len(frames) < 64:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return _format(traceback.StackSummary.extract((f, f.f_lineno) for f in frames))


_OURS = (os.path.dirname(os.path.dirname(__file__)), threading.__file__, asyncio.__path__[0])


def _format(summary: traceback.StackSummary) -> str:
    # Start at the endpoint: the runtime's frames above it say nothing about the actor.
    frames = list(summary)
    first = next((i for i, f in enumerate(frames) if not f.filename.startswith(_OURS)), 0)
    return "".join(traceback.StackSummary.from_list(frames[first:]).format()[-_STACK_LIMIT:])


def explain(point: str, answer: dict[str, Any] | None, endpoint: str) -> str:
    """One actor's line(s) in a timeout message, from ``describe``'s answer (or ``None``)."""
    if answer is None:
        return (
            f"{point}: its process did not answer in time (its event loop is blocked: a "
            "C call holding the GIL, or a blocking call in an async endpoint)"
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
