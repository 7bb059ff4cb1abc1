"""Helpers of the service tests that are not actors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_rl_service(*args: str) -> tuple[str, dict[str, Any], str]:
    """Run the example; its stdout, its summary line (parsed) and its stderr."""
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "rl_service.py"), *args],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=REPO,
    )
    assert done.returncode == 0, f"rl_service.py failed:\n{done.stdout}\n{done.stderr}"
    last = done.stdout.splitlines()[-1]
    assert last.startswith("summary ")
    return done.stdout, json.loads(last.removeprefix("summary ")), done.stderr
