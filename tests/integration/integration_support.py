"""Helpers shared by the integration tests (plain functions, no fixtures)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coro`` on a fresh asyncio loop (as a user's ``asyncio.run(main())`` does)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    state = stat.rsplit(b")", 1)[1].split()[0]
    return state in (b"Z", b"X")


def live(pids: list[int]) -> list[int]:
    """The processes of ``pids`` that are still running."""
    return [pid for pid in pids if not process_gone(pid)]


def run_script(
    source: str,
    tmp_path: Path,
    *,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a ``__main__`` script in a new Python process; capture its output."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=tmp_path,
    )
