"""Waiting in tests without sleeping blind: poll a condition under a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["live", "process_gone", "run", "wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``predicate`` until it holds; the seconds it took.

    Raises:
        AssertionError: it did not hold within ``timeout`` seconds (``what`` says what
            was awaited).
    """
    start = time.monotonic()
    deadline = start + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - start


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coro`` on a fresh asyncio loop (as ``asyncio.run(main())``), at most
    ``timeout`` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


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
