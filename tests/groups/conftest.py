"""Fixtures for the actor-group tests (issue 6): real worker processes, real sockets.

The actor classes live in ``groups_actors.py`` next to this file; workers unpickle them by
module name, so this directory goes on ``PYTHONPATH`` here, at import, before any worker
starts (workers inherit the controller's environment).
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)
