"""Helpers shared by the actor-group tests (plain functions, no fixtures)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds.

    For events only the runtime sees (a process death reaching the failure hook); never
    to let a call "probably finish".
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
