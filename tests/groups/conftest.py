"""Fixtures for the actor-group tests (issue 6): real worker processes, real sockets.

The actor classes live in ``groups_actors.py`` next to this file; workers unpickle them by
module name, so this directory goes on ``PYTHONPATH`` here, at import, before any worker
starts (workers inherit the controller's environment).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import actormesh

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture
def failures() -> Iterator[list[actormesh.Failure]]:
    """Collects unhandled mesh failures instead of printing them; restores the default."""
    seen: list[actormesh.Failure] = []
    actormesh.set_failure_hook(seen.append)
    try:
        yield seen
    finally:
        actormesh.set_failure_hook(None)
