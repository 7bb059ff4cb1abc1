"""Fixtures for the multi-host tests: several "hosts" made of Linux network namespaces.

``network`` builds, for one test module, a bridge in this (root) namespace holding the
controller's address ``10.77.K.1`` and three namespaces ``10.77.K.11`` .. ``.13`` plugged
into it with veth pairs (``actormesh.testing.namespace_hosts``). Creating namespaces needs
root; without ``ip netns`` the tests that need it are skipped, saying why.

Actor classes live in ``multihost_actors.py``; this directory goes on ``PYTHONPATH`` so
that workers, wherever they run, import them by name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from multihost_support import HERE, namespaces_or_skip

from actormesh.testing import Network

os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    """Three namespaces on a bridge with this namespace (see ``actormesh.testing``)."""
    yield from namespaces_or_skip(3)
