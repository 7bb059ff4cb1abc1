"""Timelines: the calls every rank ran, as a Chrome / Perfetto trace (``ray timeline``'s
counterpart).

The controller asks each process of its live meshes for the call spans it kept (an
OBSERVE for ``"timeline"``, answered from the ring of ``actormesh._core._timeline``) and
writes them in the Trace Event Format (JSON), which https://ui.perfetto.dev and
``chrome://tracing`` open:

- one *process* per worker process (named ``<mesh> rank <r> (pid P on host)``, for the
  actors it hosts), one *thread* per actor in it;
- one complete event (``"ph": "X"``) per call the actor ran: its endpoint as the name,
  the mesh as the category, its start and run time, and in ``args`` the time it waited
  in the actor's mailbox (``queue_ms``), the bytes of its arguments and its answer, the
  request id and how it ran (``def``, ``async``, ``concurrent``). A call of a concurrent
  endpoint, which may overlap others, is an async slice (``"ph": "b"``/``"e"``) instead;
- one async slice (category ``call``) per call each process made, from its sending to
  its last answer, on a thread track ``calls made`` (the controller is a process of the
  trace too, for its calls);
- one async slice (``"ph": "b"``/``"e"``, category ``queue``) per call that arrived
  while another ran and so waited in the mailbox, from its arrival to its start (every
  call's wait, a hand-off between threads included, is in its ``queue_ms``).

Times are wall-clock microseconds: each process' spans are moved from its monotonic
clock by the offset it reported, so processes on other hosts line up as well as their
clocks agree. Runs on the controller's loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .._api import Future, MeshRef, point_of
from .._core import RECORDER, Span, observe
from .._hosts import Runtime

__all__ = ["collect", "timeline", "trace_events", "write_trace"]


def timeline(
    path: str | os.PathLike[str] | None = None,
    *,
    mesh: str | None = None,
    last: float | None = None,
    timeout: float = 5.0,
) -> Future[dict[str, Any]]:
    """The calls every rank of this controller's live meshes ran, as a Chrome / Perfetto
    trace (a dict in the Trace Event Format), written to ``path`` as JSON when given.

    Args:
        path: where to write the trace (``trace.json``); open it at
            https://ui.perfetto.dev or in ``chrome://tracing``.
        mesh: only the mesh of this name.
        last: only calls that ended in the last ``last`` seconds (default: all the
            processes kept, ``Config.timeline_spans`` each).
        timeout: seconds each process gets to answer (a silent one is left out and
            named in ``otherData.missing``).

    Raises:
        ValueError: ``last`` or ``timeout`` not positive.
    """
    if last is not None and last <= 0:
        raise ValueError(f"timeline: last must be positive seconds, not {last!r}")
    if timeout <= 0:
        raise ValueError(f"timeline: timeout must be positive, not {timeout!r}")
    from .._api import from_concurrent  # (it imports this package)
    from . import observer

    runtime = Runtime.get()
    found = observer(runtime)
    refs = found.meshes.live(mesh) if found is not None else []

    async def run() -> dict[str, Any]:
        trace = await collect(runtime, refs, last, timeout)
        if path is not None:
            await asyncio.get_running_loop().run_in_executor(None, write_trace, trace, path)
        return trace

    return from_concurrent(runtime, runtime.submit(run()))


def write_trace(trace: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as JSON to ``path`` (through a temporary file: a reader never
    sees half of it)."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(trace, separators=(",", ":")), encoding="utf-8")
    partial.replace(target)


async def collect(
    runtime: Any, refs: Iterable[MeshRef], last: float | None, timeout: float
) -> dict[str, Any]:
    """The trace of the calls of the meshes ``refs`` that ended in the last ``last``
    seconds (all that the processes kept, when ``None``)."""
    refs = list(refs)
    since = None if last is None else time.time() - last
    what = "timeline" if since is None else f"timeline:{since!r}"
    paths = sorted({path for ref in refs for path in ref.paths})
    answers = await observe(runtime, paths, what, timeout)
    hosts = {path: _host(runtime, path) for path in paths}
    return trace_events(refs, answers, hosts, since, RECORDER.take(since))


def _host(runtime: Any, path: str) -> str:
    child = runtime.children.processes.get(path)
    return str(getattr(child, "host", None) or socket.gethostname())


def trace_events(
    refs: list[MeshRef],
    answers: dict[str, dict[str, Any]],
    hosts: dict[str, str],
    since: float | None,
    controller: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the trace (see the module docstring) from each process' answer and the
    controller's own ring (its calls)."""
    by_id = {ref.mesh_id: ref for ref in refs}
    events: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    ids = itertools.count(1)  # of async slices, unique in the trace
    made = _calls_made(controller, by_id, 1, ids) if controller is not None else []
    if made:
        assert controller is not None
        label = f"controller (pid {controller['pid']} on {socket.gethostname()})"
        events.append(_meta("process_name", 1, 0, label))
        events.append(_meta("process_sort_index", 1, 0, 0, key="sort_index"))
        events.extend(made)
    for index, path in enumerate(sorted(answers), 2):
        answer = answers[path]
        if "error" in answer:
            missing[path] = str(answer["error"])
            continue
        offset = float(answer["offset"])
        if controller is None or answer.get("pid") != controller["pid"]:
            # (The controller hosting actors itself answers too: its calls are in already.)
            events.extend(_calls_made(answer, by_id, index, ids))
        actors: dict[tuple[str, int], int] = {}
        busy_until: dict[int, float] = {}  # by thread: when its last call ended
        for span in answer["spans"]:  # in the order they ended
            ref = by_id.get(span[0])
            if ref is None:
                continue  # an actor of a mesh not asked about (or not the controller's)
            tid = actors.setdefault((span[0], span[1]), len(actors) + 1)
            behind = span[3] < busy_until.get(tid, -math.inf)
            events.extend(_call(span, ref.name, offset, index, tid, ids, behind))
            if span[10] != "concurrent":
                busy_until[tid] = span[5]
        if not actors:
            continue
        names = sorted(f"{by_id[m].name} rank {r}" for m, r in actors)
        label = f"{', '.join(names)} (pid {answer['pid']} on {hosts.get(path, '?')})"
        events.append(_meta("process_name", index, 0, label))
        events.append(_meta("process_sort_index", index, 0, index, key="sort_index"))
        for (mesh_id, rank), tid in actors.items():
            ref = by_id[mesh_id]
            thread = f"{ref.name} {point_of(ref, rank).brief()}"
            events.append(_meta("thread_name", index, tid, thread))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "source": "actormesh timeline",
            "since": since,
            "made": time.time(),
            "meshes": [ref.name for ref in refs],
            "missing": missing,
        },
    }


_CALLS_TID = 1_000_000  # the thread track of the calls a process made


def _calls_made(
    answer: dict[str, Any], by_id: dict[str, MeshRef], pid: int, ids: Iterator[int]
) -> list[dict[str, Any]]:
    """The calls a process made to the meshes ``by_id``, as async slices (they overlap
    when pipelined) on a thread track of their own, ``calls made``."""
    calls = [call for call in answer.get("calls") or () if call[0] in by_id]
    if not calls:
        return []
    offset = float(answer["offset"])
    events = [_meta("thread_name", pid, _CALLS_TID, "calls made")]
    for _, mesh, endpoint, req_id, sent, done, ranks, ok in calls:
        slice_id = next(ids)
        where = {"name": f"{mesh}.{endpoint}", "cat": "call", "id": slice_id, "pid": pid,
                 "tid": _CALLS_TID}  # fmt: skip
        args = {"ranks": ranks, "req_id": req_id, "ok": ok}
        events.append({"ph": "b", "ts": _us(sent + offset), "args": args, **where})
        events.append({"ph": "e", "ts": _us(done + offset), **where})
    return events


def _call(
    span: Span,
    mesh: str,
    offset: float,
    pid: int,
    tid: int,
    ids: Iterator[int],
    behind: bool,
) -> list[dict[str, Any]]:
    """The events of one call: a complete event on the actor's thread (an async slice
    for a concurrent endpoint, which may overlap others), and, when it arrived while
    another call ran (``behind``), its wait in the mailbox as an async slice."""
    _, rank, endpoint, arrived, started, ended, ok, size_in, size_out, req_id, kind = span
    queued = max(0.0, started - arrived)
    args = {
        "rank": rank,
        "ok": ok,
        "queue_ms": round(queued * 1e3, 3),
        "bytes_in": size_in,
        "bytes_out": size_out,
        "req_id": req_id,
        "kind": kind,
    }
    where = {"pid": pid, "tid": tid}
    if kind == "concurrent":
        slice_id = next(ids)
        events = [
            {
                "name": endpoint,
                "cat": mesh,
                "ph": "b",
                "id": slice_id,
                "ts": _us(started + offset),
                "args": args,
                **where,
            },
            {
                "name": endpoint,
                "cat": mesh,
                "ph": "e",
                "id": slice_id,
                "ts": _us(ended + offset),
                **where,
            },
        ]
    else:
        events = [
            {
                "name": endpoint,
                "cat": mesh,
                "ph": "X",
                "ts": _us(started + offset),
                "dur": _us(ended - started),
                "args": args,
                **where,
            }
        ]
    if behind and queued > 0:
        wait_id, name = next(ids), f"queued {endpoint}"
        common = {"name": name, "cat": "queue", "id": wait_id, **where}
        events.append({"ph": "b", "ts": _us(arrived + offset), **common})
        events.append({"ph": "e", "ts": _us(started + offset), **common})
    return events


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _meta(name: str, pid: int, tid: int, value: Any, key: str = "name") -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}
