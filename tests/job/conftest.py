"""Set-up of the job tests: controllers run as processes of their own
(``job_programs.py``, through ``job_support.run_controller``), as a user re-runs a
script; this directory is put on ``PYTHONPATH`` so they (and their workers) import the
actor class by module name."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)
