"""``python -m bench.callcount``: Python work per call, counted, not timed.

Timings on a shared machine move by 10 to 50% from run to run; a count of the Python
function calls (``--what calls``, by ``sys.setprofile``) or bytecode instructions
(``--what bytecode``, by ``sys.settrace`` with opcode events) each process runs per call
does not move with the load. One mesh of 4 actors in 4 worker processes; for the small-
message rows of ``python -m bench`` (``rtt_async``: ``call_one`` awaited one at a time,
``gather_4``: ``call`` to the 4 and gather, ``pipelined``: ``--calls`` sends, then
every reply awaited) it counts, per call, in the controller (its thread and the
runtime's loop) and in the workers (their loops and actor threads, summed over the 4).

The reply spin is turned off (``ACTORMESH_REPLY_SPIN=0``): how many times a caller
polls before its reply arrives depends on the machine's speed, not on the code. Timers
that run now and then whatever the calls do (heartbeats, the reaper) are left out too.
What remains is the same from run to run within about 1%.

To compare two commits, run this script of one tree against the other tree's package::

    PYTHONPATH=/path/to/other/checkout/src python -m bench.callcount

from this repository's root (the workers get the same ``PYTHONPATH``, and find
``bench`` in their working directory, which is the controller's). Build the other
tree's compiled extensions in place first (``python setup.py build_ext --inplace``
there): without them it runs, and is counted, on the pure-Python path (the first line
printed says which).
``--top N`` lists the N functions with the most per call on each side.
``bench/tests/test_callcount.py`` runs a small form.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

from actormesh import Actor, endpoint, proc_mesh

ROWS = ("rtt_async", "gather_4", "pipelined")
# Counted by how long a reply takes (the spin's polling), or by the clock (timers).
_LEFT_OUT = {
    "perf_counter", "done", "poll.poll", "_read", "epoll.poll", "read_ready", "closed",
    "_handle_ping", "_send_soon", "children_of", "tick",
}  # fmt: skip
# The event loop's own machinery (how often it turns depends on timing), the reaper's.
_LEFT_OUT_FILES = ("selectors.py", "_reaper.py")

# (file, function) -> count, while ``_on``; one tally per process.
_counts: Counter[tuple[str, str]] = Counter()
_on = False


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if not _on:
        return
    if event == "call":
        _counts[(frame.f_code.co_filename, frame.f_code.co_name)] += 1
    elif event == "c_call":
        _counts[("C", getattr(arg, "__qualname__", None) or repr(arg))] += 1


def _opcodes(frame: FrameType, event: str, arg: Any) -> Any:
    if event == "opcode" and _on:
        _counts[(frame.f_code.co_filename, frame.f_code.co_name)] += 1
    return _opcodes


def _trace(frame: FrameType, event: str, arg: Any) -> Any:
    frame.f_trace_opcodes = True
    return _opcodes


def _install(what: str) -> None:
    """Count in this thread from now on (while ``_on``)."""
    if what == "bytecode":
        sys.settrace(_trace)
    else:
        sys.setprofile(_profile)


def _start(what: str) -> None:
    """Count in this thread, the runtime's loop thread, and threads started later."""
    global _on
    from actormesh._core import CoreRuntime  # the loop thread is not reachable otherwise

    _install(what)
    runtime = CoreRuntime.current()
    if runtime is not None and not runtime.in_loop_thread():
        installed = threading.Event()

        def on_loop() -> None:
            _install(what)
            installed.set()

        runtime.loop.call_soon_threadsafe(on_loop)
        installed.wait(10)
    if what == "bytecode":
        threading.settrace(_trace)
    else:
        threading.setprofile(_profile)
    _counts.clear()
    _on = True


def _stop() -> list[tuple[str, str, int]]:
    global _on
    _on = False
    return [(path, name, n) for (path, name), n in _counts.items()]


class Counted(Actor):
    """The echo actor, and the switch of its process' counting."""

    @endpoint
    async def ping(self, x: Any) -> Any:
        return x

    @endpoint
    async def start_counting(self, what: str) -> None:
        _start(what)

    @endpoint
    async def stop_counting(self) -> list[tuple[str, str, int]]:
        return _stop()


def _tally(rows: list[tuple[str, str, int]], calls: int) -> tuple[float, float, Counter[str]]:
    """Per call: Python counts, C counts, and each function's (left-out ones dropped)."""
    python = native = 0
    by_function: Counter[str] = Counter()
    for path, name, n in rows:
        if name in _LEFT_OUT or "/asyncio/" in path or path.endswith(_LEFT_OUT_FILES):
            continue
        if path == "C":
            native += n
        else:
            python += n
        where = "C" if path == "C" else path.split("/src/")[-1].split("/lib/python")[-1]
        by_function[f"{where}:{name}"] += n
    return python / calls, native / calls, by_function


async def measure(calls: int = 1000, what: str = "calls") -> dict[str, dict[str, Any]]:
    """Per row: ``controller`` and ``workers`` (Python, C per call; C is 0 for bytecode),
    and ``top``: each side's per-function counts (a ``Counter`` of totals over ``calls``)."""
    procs = await proc_mesh(gpus=4)
    try:
        mesh = await procs.spawn("counted", Counted)
        one = mesh.slice(gpus=0)

        async def rtt_async() -> None:
            for _ in range(calls):
                await one.ping.call_one(None)

        async def gather_4() -> None:
            for _ in range(calls):
                (await mesh.ping.call(None)).values()

        async def pipelined() -> None:
            for pending in [one.ping.call_one(i) for i in range(calls)]:
                await pending

        rows: dict[str, Callable[[], Awaitable[None]]] = {
            "rtt_async": rtt_async,
            "gather_4": gather_4,
            "pipelined": pipelined,
        }
        out: dict[str, dict[str, Any]] = {}
        for name, run in rows.items():
            await run()  # warm: connections, caches, the first call's imports
            await mesh.start_counting.call(what)
            _start(what)
            await run()
            controller = _stop()
            workers = [row for rows_ in (await mesh.stop_counting.call()).values() for row in rows_]
            sys.settrace(None)
            sys.setprofile(None)
            c_py, c_native, c_top = _tally(controller, calls)
            w_py, w_native, w_top = _tally(workers, calls)
            out[name] = {
                "controller": (c_py, c_native),
                "workers": (w_py, w_native),
                "top": {"controller": c_top, "workers": w_top},
            }
        return out
    finally:
        threading.settrace(None)
        threading.setprofile(None)
        await procs.stop()


def table(results: dict[str, dict[str, Any]], what: str) -> str:
    unit = "Python calls + C calls" if what == "calls" else "bytecode instructions"
    lines = [f"| row | controller, {unit} per call | workers, {unit} per call |", "|---|---|---|"]
    for name, r in results.items():
        cells = [
            f"{py:,.1f}" + (f" + {native:,.1f}" if what == "calls" else "")
            for py, native in (r["controller"], r["workers"])
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.callcount", description=__doc__)
    parser.add_argument("--calls", type=int, default=1000, help="calls counted per row")
    parser.add_argument("--what", choices=("calls", "bytecode"), default="calls")
    parser.add_argument("--top", type=int, default=0, help="list the top N functions")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    os.environ["ACTORMESH_REPLY_SPIN"] = "0"  # read when the runtime starts, below
    import actormesh
    from actormesh._core import _dispatch

    results = asyncio.run(measure(args.calls, args.what))
    path = "compiled" if getattr(_dispatch, "COMPILED", False) else "pure-Python"
    print(
        f"actormesh from {Path(actormesh.__file__).parent} ({path} dispatch), "
        f"{args.calls} calls per row\n"
    )
    print(table(results, args.what))
    for name, r in results.items() if args.top else ():
        for side in ("controller", "workers"):
            print(f"\n{name}, {side}, per call:")
            for function, n in r["top"][side].most_common(args.top):
                print(f"  {n / args.calls:8.2f}  {function}")


if __name__ == "__main__":
    # Run as ``bench.callcount``, not ``__main__``: the workers import the actor's class
    # by that name, and the controller must count with the same module's tally.
    from bench.callcount import main as main_of_module

    main_of_module()
