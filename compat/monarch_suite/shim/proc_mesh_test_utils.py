"""Stands in for Monarch's tests/proc_mesh_test_utils.py on the actormesh side.

Monarch's autouse fixture ``stop_all_proc_meshes`` stops the process meshes a test left
behind, through ``monarch.config`` and the client's private ``_children``. Here it does
nothing: each file runs in a process of its own and the runner ends whatever it leaves.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def stop_all_proc_meshes() -> Iterator[None]:
    """Harness plumbing: nothing to do on actormesh."""
    yield
