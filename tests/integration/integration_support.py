"""Helpers shared by the integration tests (plain functions, no fixtures)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]


def run_script(
    source: str,
    tmp_path: Path,
    *,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a ``__main__`` script in a new Python process; capture its output."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=tmp_path,
    )
