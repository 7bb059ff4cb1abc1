"""Fixtures for the RDMA buffer tests: real worker processes that own and read memory.

The actor classes live in ``rdma_actors.py`` next to this file; workers unpickle them by
module name, so this directory goes on ``PYTHONPATH`` before any worker starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from actormesh.actor import ProcMesh, this_host

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    """Two worker processes on this host."""
    mesh = this_host().spawn_procs(per_host={"procs": 2})
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)
