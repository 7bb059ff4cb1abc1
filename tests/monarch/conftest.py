"""Fixtures of the Monarch behaviour tests: ``actormesh.actor`` used as ``monarch.actor``.

Each test here checks that a public name of ``actormesh.actor`` behaves as the same name
of ``monarch.actor`` in torchmonarch 0.7.0 does, importing only what a Monarch program
imports (``from actormesh.actor import X`` for ``from monarch.actor import X``). Where
actormesh still differs, the test asserts Monarch's behaviour and is marked ``xfail``
with the difference as its reason.

The actor classes live in ``monarch_actors.py`` next to this file. Workers unpickle them
by module name, so this directory is put on ``PYTHONPATH`` here, at import, before any
worker starts (workers inherit the controller's environment).

Process meshes are slow to start compared with calls, so the tests of a module share
one ``{"nodes": 2, "gpus": 2}`` process mesh and spawn their actor meshes in it. Tests
that kill or stop processes start meshes of their own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import actormesh.actor
from actormesh.actor import MeshFailure, ProcMesh, this_host

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo
else:
    from monarch_actors import Echo

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    """A ``{"nodes": 2, "gpus": 2}`` process mesh on this host, shared by one module."""
    mesh = this_host().spawn_procs(per_host={"nodes": 2, "gpus": 2})
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> Echo:
    """An ``Echo`` on every process of ``procs``, shared by one module."""
    return procs.spawn("echo", Echo)


@pytest.fixture
def fault_hook() -> Iterator[list[MeshFailure]]:
    """Replaces ``actormesh.actor.unhandled_fault_hook`` (as a Monarch program does) with
    one that records each failure; puts the previous hook back afterwards."""
    failures: list[MeshFailure] = []
    previous = actormesh.actor.unhandled_fault_hook
    # Monarch's way: assign the module attribute (a typed function there: hence the ignore).
    actormesh.actor.unhandled_fault_hook = failures.append  # type: ignore[assignment]
    try:
        yield failures
    finally:
        actormesh.actor.unhandled_fault_hook = previous
