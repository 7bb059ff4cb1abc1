"""Helpers of the job tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run_controller(phase: str, args: dict[str, Any], *, timeout: float = 150) -> dict[str, Any]:
    """Run ``job_programs.py PHASE`` as a fresh process; the JSON it printed last."""
    done = subprocess.run(
        [sys.executable, "-m", "job_programs", phase, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
