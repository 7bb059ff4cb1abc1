"""Native stacks of a process on this host, through py-spy (``actormesh stacks --native``).

``py-spy dump --native --json`` reads another process' memory (ptrace) and reports each
thread's frames, C and Python interleaved, and which thread holds the GIL, without the
process doing anything: it works when its event loop is blocked by a C call holding the
GIL, the case where the Python stacks of ``actormesh stacks`` cannot be had.

py-spy is PyPI's ``py-spy`` (``pip install 'actormesh[native]'``), found next to this
interpreter or on ``PATH``. It must be allowed to trace the process: root or
``CAP_SYS_PTRACE`` may always; otherwise, where Yama's ``ptrace_scope`` is 1 (Ubuntu's
default), only ancestors may, so each worker names its owner as its tracer
(``let_owner_trace``), which lets the owner's children, py-spy among them, attach.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import re
import shutil
import sys
from typing import Any

__all__ = ["format_frame", "let_owner_trace", "native_stacks", "py_spy"]

_PR_SET_PTRACER = 0x59616D61  # "Yama"
_ADDRESS = re.compile(r"^0x[0-9a-f]+$")


def let_owner_trace(owner: int) -> None:
    """Allow ``owner`` and its descendants to ptrace this process (Yama; a no-op where
    Yama is absent or already lets them)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PTRACER, owner, 0, 0, 0)


def py_spy() -> str | None:
    """The py-spy program: beside this interpreter (a virtualenv's ``bin``), else on
    ``PATH``; ``None`` when it is not installed."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


async def native_stacks(pid: int, timeout: float) -> dict[str, Any]:
    """Every thread of process ``pid``: ``{"threads": [{"name", "tid", "gil", "active",
    "frames": [text, ...]}, ...]}``, innermost frame first, or ``{"error": why}``."""
    program = py_spy()
    if program is None:
        return {"error": "py-spy is not installed (pip install 'actormesh[native]')"}
    try:
        process = await asyncio.create_subprocess_exec(
            program,
            "dump",
            "--pid",
            str(pid),
            "--native",
            "--json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as error:
        return {"error": f"py-spy could not start: {error}"}
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return {"error": f"py-spy did not finish within {timeout:g} s"}
    if process.returncode != 0:
        why = err.decode(errors="replace").strip().splitlines()
        return {"error": f"py-spy failed: {why[-1] if why else process.returncode}"}
    try:
        threads = json.loads(out)
    except ValueError as error:
        return {"error": f"py-spy's output is not JSON: {error}"}
    return {
        "threads": [
            {
                "name": thread.get("thread_name") or "",
                "tid": thread.get("os_thread_id"),
                "gil": bool(thread.get("owns_gil")),
                "active": bool(thread.get("active")),
                "frames": [format_frame(frame) for frame in thread.get("frames") or ()],
            }
            for thread in threads
        ]
    }


def format_frame(frame: dict[str, Any]) -> str:
    """``sleep (libc.so.6)``, ``step (train.py:40)``; an unnamed native frame is ``??``
    (its address differs in every process: ranks stuck in the same place group)."""
    name = str(frame.get("name") or "??")
    if _ADDRESS.match(name):
        name = "??"
    where = str(frame.get("short_filename") or frame.get("filename") or "?")
    line = frame.get("line") or 0
    return f"{name} ({where}:{line})" if line else f"{name} ({where})"
