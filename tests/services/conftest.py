"""Fixtures for the service tests (issue 26): real replicas of real worker processes.

The actor classes live in ``service_actors.py`` next to this file; workers unpickle them
by module name, so this directory goes on ``PYTHONPATH`` here, before any worker starts.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)
