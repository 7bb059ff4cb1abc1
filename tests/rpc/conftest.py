"""Fixtures of the RPC tests: groups of real processes started with ``multiprocessing``.

The programs the workers run live in ``rpc_programs.py`` next to this file; workers import
them by name, so this directory goes on ``PYTHONPATH`` here, before any worker starts.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)
