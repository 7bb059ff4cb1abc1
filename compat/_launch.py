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

Standard library only: the launcher runs under the runner's interpreter, the program
under whichever the runner names.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

_PR_SET_CHILD_SUBREAPER = 36
# How long a program's processes get to exit by themselves once the program has.
_LEFTOVER_GRACE_S = 5.0
_KILL_GRACE_S = 3.0


def become_subreaper() -> bool:
    """Ask the kernel to re-parent our orphaned descendants to us instead of init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie: exited, only waiting to be reaped
        return None
    return int(fields[1])


def descendants(root: int) -> list[int]:
    """Live descendants of ``root`` (not ``root``), parents before children."""
    by_parent: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                by_parent.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    frontier = [root]
    while frontier:
        kids = [k for p in frontier for k in sorted(by_parent.get(p, []))]
        found.extend(kids)
        frontier = kids
    return found


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
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        alive = _wait_gone(_KILL_GRACE_S)
        if not alive:
            break
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
