"""Helpers shared by the integration tests (plain functions, no fixtures)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TypeVar

from actormesh.testing import live, wait_until

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


def kill_controller_and_wait(program: str, count: int, within: float, what: str) -> None:
    """Run ``program`` as a controller in a new interpreter, SIGKILL it, and wait until
    the processes it started are gone.

    The program prints the ``count`` pids it started on one line once they run, then
    reads stdin (so it lives until killed). Fails if they are not all gone ``within``
    seconds of the kill.
    """
    controller = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(program)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert controller.stdout is not None
        pids = [int(pid) for pid in controller.stdout.readline().split()]
        assert len(pids) == count, pids
        assert live(pids) == pids
        controller.kill()
        controller.wait(10)
        wait_until(lambda: not live(pids), within, what)
    finally:
        controller.kill()
        controller.wait(10)


def run_cell(client: object, code: str, timeout: float = 60.0) -> tuple[str, list[str]]:
    """Execute ``code``; return its stdout text and the error names it raised."""
    msg_id = client.execute(textwrap.dedent(code))  # type: ignore[attr-defined]
    out: list[str] = []
    errors: list[str] = []
    while True:
        try:
            msg = client.get_iopub_msg(timeout=timeout)  # type: ignore[attr-defined]
        except queue.Empty:
            raise AssertionError(f"the kernel did not finish the cell in {timeout} s") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "error":
            errors.append(f"{content['ename']}: {content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out), errors
