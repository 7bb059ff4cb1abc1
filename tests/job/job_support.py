"""Helpers of the job tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _run(
    phase: str, args: dict[str, Any], env: dict[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "job_programs", phase, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE,
        env=env,
    )


def run_controller(
    phase: str, args: dict[str, Any], *, env: dict[str, str] | None = None, timeout: float = 150
) -> dict[str, Any]:
    """Run ``job_programs.py PHASE`` as a fresh process (in ``env``, default ours); the
    JSON it printed last."""
    done = _run(phase, args, env, timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def controller_error(
    phase: str, args: dict[str, Any], *, env: dict[str, str] | None = None, timeout: float = 150
) -> str:
    """Run ``job_programs.py PHASE``, which must fail; the last line of its stderr."""
    done = _run(phase, args, env, timeout)
    assert done.returncode != 0, done.stdout[-2000:]
    return done.stderr.strip().splitlines()[-1]
