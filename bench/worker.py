"""``python -m bench.worker``: run some workloads of one system in this fresh process.

The runner starts one worker per (system, group) and reads its events, one JSON
object per line, from the file descriptor given by ``--fd``:

- ``{"event": "hello", "version": ...}`` once the system is imported, or
  ``{"event": "missing", "reason": ...}`` if it is not installed;
- ``{"event": "start", "workload": name}`` before each workload;
- ``{"event": "result", "workload": name, "status": ..., ...}`` after it.

Anything the system prints goes to this process's stdout/stderr (a log file).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import sys
import time
import traceback
from typing import Any

from bench import procfs
from bench.systems import entry
from bench.systems.base import NotApplicable, NotAvailable
from bench.workloads import Context, resolve

__all__ = ["main"]


class _Events:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def emit(self, **event: Any) -> None:
        data = (json.dumps(event, default=repr) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data) :]


def _run_one(ctx: Context, runner: asyncio.Runner, name: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        fn = resolve(ctx.system, name)
        if inspect.iscoroutinefunction(fn):
            metrics = runner.run(fn(ctx))
        else:
            metrics = fn(ctx)
            assert not inspect.isawaitable(metrics)
        status: dict[str, Any] = {"status": "ok", "metrics": metrics}
    except NotApplicable as e:
        status = {"status": "n/a", "reason": str(e)}
    except NotAvailable as e:
        status = {"status": "not available", "reason": str(e)}
    except Exception as e:
        traceback.print_exc()
        status = {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
    return {**status, "wall_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the workloads, emitting events."""
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    parser.add_argument("--system", required=True)
    parser.add_argument("--workloads", required=True, help="comma-separated names")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fd", type=int, default=1)
    args = parser.parse_args(argv)
    events = _Events(args.fd)
    procfs.become_subreaper()
    sys_entry = entry(args.system)
    if not sys_entry.installed():
        events.emit(event="missing", reason=f"{sys_entry.requires} is not importable")
        return 0
    try:
        system = sys_entry.load()
    except ImportError as e:
        events.emit(event="missing", reason=f"{type(e).__name__}: {e}")
        return 0
    events.emit(event="hello", version=sys_entry.version(), pid=os.getpid())
    ctx = Context(system, args.system, args.quick)
    runner = asyncio.Runner()
    try:
        for name in args.workloads.split(","):
            events.emit(event="start", workload=name)
            events.emit(event="result", workload=name, **_run_one(ctx, runner, name))
    finally:
        try:
            ctx.close()
        except Exception:
            traceback.print_exc()
        runner.close()
        leftovers = procfs.end_processes(procfs.descendants(os.getpid()))
        events.emit(event="bye", leftovers=len(leftovers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
