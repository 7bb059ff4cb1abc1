"""What a process and its actors are doing: the answer to an OBSERVE frame, and asking.

A worker answers on its event loop, from what its mailboxes know: per hosted actor, the
message it runs (endpoint, for how long), how many wait behind it, the calls of
concurrent endpoints under way, each endpoint's counts and run times, and whether it is
stopped at a breakpoint; for the process, its pid, CPU seconds and resident memory.
Asked for ``"stacks"``, it adds every thread's Python stack and the awaited coroutines
of each actor's running ``async`` endpoint. Asked for ``"metrics"``, it hands over the
tallies of ``record_metric`` instead (``_metrics.take``); for ``"timeline"`` (or
``"timeline:<since>"``), the call spans it kept (``_timeline``).

``observe`` is the asking side: one OBSERVE to each process, answers gathered until all
came or the time ran out (a process whose loop is blocked cannot answer: it is reported
as silent, which says something too). Everything is plain dicts, so it pickles without
the actors' objects and turns into JSON for the ``actormesh`` command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._transport import Connection, Link, TransportClosed
from . import _headers as hdr
from . import _metrics
from ._inspect import task_stack, thread_stacks
from ._mailbox import Mailbox
from ._serialization import dumps, loads
from ._timeline import RECORDER

__all__ = ["answer", "observe", "process_usage", "reply"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_usage() -> dict[str, Any]:
    """This process: pid, CPU seconds used (user + system) and resident memory (bytes)."""
    times = os.times()
    rss = None
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/statm", "rb") as f:
        rss = int(f.read().split()[1]) * _PAGE
    return {
        "pid": os.getpid(),
        "cpu": times.user + times.system,
        "rss": rss,
        "threads": threading.active_count(),
    }


def answer(
    actors: Iterable[tuple[str, int, str, dict[str, int], Mailbox]],
    what: str,
    paused: Mapping[tuple[str, int], dict[str, Any]],
) -> dict[str, Any]:
    """The answer to an OBSERVE for ``what`` ("stats", "stacks" or "metrics"); loop thread.

    ``actors``: ``(mesh id, rank, mesh name, coordinates, mailbox)`` of each hosted actor;
    ``paused``: the actors stopped at a breakpoint, by ``(mesh id, rank)``.
    """
    if what == "metrics":
        return {"pid": os.getpid(), "metrics": _metrics.take()}
    if what.startswith("timeline"):  # "timeline" or "timeline:<since, wall seconds>"
        since = what.partition(":")[2]
        return RECORDER.take(float(since) if since else None)
    now = time.monotonic()
    threads = thread_stacks() if what == "stacks" else None
    report: dict[str, Any] = {**process_usage(), "actors": []}
    for mesh_id, rank, name, point, mailbox in actors:
        current = mailbox.current
        entry: dict[str, Any] = {
            "mesh_id": mesh_id,
            "rank": rank,
            "name": name,
            "point": point,
            "state": "running" if current is not None else "idle",
            "endpoint": current.endpoint if current is not None else None,
            "seconds": now - mailbox.since if current is not None else None,
            "queued": len(mailbox.queued()),
            "concurrent": sorted(m.endpoint for m in mailbox.concurrent),
            "endpoints": mailbox.stats.summary() if mailbox.stats is not None else {},
        }
        stop = paused.get((mesh_id, rank))
        if stop is not None:
            entry["state"] = "paused"
            entry["paused_at"] = stop.get("where")
        if threads is not None:
            entry["thread"] = mailbox.thread_id
            task = mailbox.drain_task
            tasks: list[asyncio.Task[Any]] = list(mailbox.concurrent.values())
            if task is not None and current is not None:
                tasks.insert(0, task)
            entry["tasks"] = [task_stack(t, limit=40) for t in tasks]
        report["actors"].append(entry)
    if threads is not None:
        report["threads"] = threads
    return report


class _Request:
    """One OBSERVE to one process: its answer, or why there is none (``ReplyHandler``)."""

    def __init__(self, conn: Connection, path: str, finish: Callable[[str, Any], None]) -> None:
        self.conn = conn
        self.path = path
        self.finish = finish

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        try:
            value = loads(parts[0], parts[1:]) if ok else {"error": "the process refused"}
        except Exception as error:
            value = {"error": f"unreadable answer: {error!r}"}
        self.finish(self.path, value)
        return True

    def on_lost(self, conn: Connection, reason: str) -> bool:
        if conn is not self.conn:
            return False
        self.finish(self.path, {"error": reason})
        return True


async def observe(
    runtime: Any, paths: Iterable[str], what: str, timeout: float
) -> dict[str, dict[str, Any]]:
    """Ask each process at ``paths`` what it is doing (on ``runtime``'s loop thread).

    Returns an answer per path: the process' ``answer`` dict, or ``{"error": why}`` when
    it is not connected, died meanwhile, or did not answer within ``timeout`` seconds.
    Never dials: only processes this one already talks to are asked.
    """
    results: dict[str, dict[str, Any]] = {}
    waiting: dict[str, int] = {}
    loop = runtime.loop
    done: asyncio.Future[None] = loop.create_future()

    def finish(path: str, value: dict[str, Any]) -> None:
        if path in results:
            return
        results[path] = value
        req = waiting.pop(path, None)
        if req is not None:
            runtime.forget(req)
        if not waiting and not done.done():
            done.set_result(None)

    for path in dict.fromkeys(paths):
        conn = runtime.known_connection(path)
        if conn is None:
            results[path] = {"error": "not connected"}
            continue
        req_id = runtime.register(_Request(conn, path, finish))
        waiting[path] = req_id
        try:
            conn.send([hdr.encode(hdr.Observe(req_id, what))])
        except TransportClosed as error:
            finish(path, {"error": str(error)})
    if waiting:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), timeout)
    for path in list(waiting):
        finish(path, {"error": f"no answer within {timeout:g} s (its event loop is blocked)"})
    return results


def reply(conn: Link, req_id: int, value: dict[str, Any]) -> None:
    """Send an OBSERVE answer back (loop thread)."""
    with contextlib.suppress(TransportClosed):
        conn.send([hdr.encode(hdr.Reply(req_id, -1, True)), dumps(value)[0]])
