"""Fixtures for the service tests (issue 26): real replicas of real worker processes.

The actor classes live in ``service_actors.py`` next to this file; workers unpickle them
by module name, so this directory goes on ``PYTHONPATH`` here, before any worker starts.
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
    """Collects the failures that reach the controller instead of printing them."""
    seen: list[actormesh.Failure] = []
    actormesh.set_failure_hook(seen.append)
    try:
        yield seen
    finally:
        actormesh.set_failure_hook(None)
