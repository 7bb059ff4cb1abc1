"""Fixtures of the RPC tests: groups of real processes started with ``multiprocessing``.

The programs the workers run live in ``rpc_programs.py`` next to this file; workers import
them by name, so this directory goes on ``PYTHONPATH`` here, before any worker starts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The tests' shared helpers (tests/tensor_facts.py) too, for workers and this process.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p
)
sys.path.append(str(HERE.parent))
