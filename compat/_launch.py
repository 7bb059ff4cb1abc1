"""Run one conformance program and leave nothing behind (used by ``compat/run.py``).

Usage: ``python compat/_launch.py REPORT_JSON -- PYTHON PROGRAM.py``

The launcher makes itself a *child subreaper* (Linux ``prctl``), so every process the
program starts, including daemonised ones (a local Ray cluster's ``gcs_server`` and
``raylet``, a mesh's workers), stays a descendant of the launcher even after its parent
exits. Once the program has exited (or the launcher is told to stop with SIGTERM, as
the runner does on a timeout), whatever of its descendants is still alive after a short
grace is ended by pid: SIGTERM, then SIGKILL. Only the launcher's own descendants are
ever signalled, so a Ray cluster or mesh that something else started is never touched.

The report (JSON) says the program's exit code and which leftover processes had to be
ended, by pid and command line.

The launcher runs under the runner's interpreter (it borrows the benchmark's process
helpers, ``bench.procfs``); the program under whichever the runner names.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script: the repository root, for bench.procfs.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.procfs import become_subreaper, descendants, end_processes

# How long a program's processes get to exit by themselves once the program has.
_LEFTOVER_GRACE_S = 5.0
_KILL_GRACE_S = 3.0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def _reap() -> None:
    # Collect any of our exited children (orphans re-parented to us included).
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _wait_gone(seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        _reap()
        alive = descendants(os.getpid())
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def end_leftovers(grace: float) -> list[dict[str, Any]]:
    """End every descendant still alive after ``grace`` s; what was ended."""
    alive = _wait_gone(grace)
    ended = [{"pid": pid, "cmdline": _cmdline(pid)} for pid in alive]
    end_processes(alive, _KILL_GRACE_S)
    _reap()
    return ended


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: Any) -> None:
    raise _Stop


def main(argv: list[str]) -> int:
    """Run ``argv`` (``REPORT -- CMD...``) as described in the module docstring."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _launch.py REPORT_JSON -- CMD...", file=sys.stderr)
        return 2
    report_path, command = argv[0], argv[2:]
    become_subreaper()
    signal.signal(signal.SIGTERM, _on_term)
    report: dict[str, Any] = {"returncode": None, "stopped": False, "leftovers": []}
    child = subprocess.Popen(command)
    try:
        report["returncode"] = child.wait()
        grace = _LEFTOVER_GRACE_S
    except (_Stop, KeyboardInterrupt):
        report["stopped"] = True
        grace = 0.0
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(_KILL_GRACE_S)
    report["leftovers"] = end_leftovers(grace)
    if child.poll() is None:
        child.kill()
        child.wait()
    if report["returncode"] is None:
        report["returncode"] = child.returncode
    with open(report_path, "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
