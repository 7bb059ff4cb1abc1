"""Fixtures for the integration tests: real worker processes, real Unix sockets.

The actor classes these tests spawn live in ``integration_actors.py`` next to this file.
Workers unpickle them by module name, so this directory is put on ``PYTHONPATH`` here,
at import, before any worker starts (workers inherit the controller's environment).

Process meshes are slow to start compared with calls, so tests share one module-scoped
mesh of four processes and spawn their own actor meshes in it (spawning is one message
per process). Tests that kill, stop or freeze processes start meshes of their own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import actormesh
from actormesh import ProcMesh, proc_mesh

HERE = Path(__file__).resolve().parent
# The tests' shared helpers (tests/tensor_facts.py) too, for workers and this process.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p
)
sys.path.append(str(HERE.parent))


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    """A ``{"dp": 2, "tp": 2}`` process mesh shared by the tests of one module."""
    mesh = proc_mesh({"dp": 2, "tp": 2}).get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture
def failure_hook() -> Iterator[list[actormesh.Failure]]:
    """Collects unhandled mesh failures instead of printing them; restores the default."""
    failures: list[actormesh.Failure] = []
    actormesh.set_failure_hook(failures.append)
    try:
        yield failures
    finally:
        actormesh.set_failure_hook(None)
