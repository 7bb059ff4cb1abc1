"""A real Ray cluster for the ``actormesh.ray`` tests, started here and shut down after.

The classes the meshes hold live in ``ray_actors.py``; Ray workers import them by module
name, so this directory goes on ``PYTHONPATH`` before Ray starts its workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[Any]:
    """One local Ray node: 4 CPUs (actors take fractions) and 2 of a custom resource."""
    ray = pytest.importorskip("ray", reason="actormesh.ray needs ray (a dev dependency)")
    ray.init(
        address="local",  # a fresh instance even if `ray start` left a cluster here
        num_cpus=4,
        resources={"slot": 2},
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()
