"""Process bookkeeping through ``/proc``: CPU time, RSS, descendants, and clean-up.

The runner and every benchmark worker make themselves *child subreapers*: a process
that a system under test daemonises (or that loses its parent when a worker is killed)
is re-parented to us instead of to init, so we can both measure it and end it. We
only ever signal processes found as our own descendants, by pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable

__all__ = [
    "become_subreaper",
    "children",
    "cpu_seconds",
    "descendants",
    "end_processes",
    "has_torch",
    "rss_mb",
]

_PR_SET_CHILD_SUBREAPER = 36
_TICKS = os.sysconf("SC_CLK_TCK")


def become_subreaper() -> bool:
    """Ask the kernel to re-parent our orphaned descendants to this process (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _parent_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[0] != "Z":  # a zombie has exited already
                parents[int(entry)] = int(fields[1])
    return parents


def children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    return sorted(p for p, parent in _parent_map().items() if parent == pid)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (not ``pid`` itself), parents before children."""
    by_parent: dict[int, list[int]] = {}
    for p, parent in _parent_map().items():
        by_parent.setdefault(parent, []).append(p)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for p in frontier:
            kids = sorted(by_parent.get(p, []))
            found.extend(kids)
            nxt.extend(kids)
        frontier = nxt
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User plus system CPU seconds consumed so far by ``pids`` (all threads)."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            # After the split above, utime and stime are fields 14 and 15 of stat(5).
            total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def has_torch(pid: int) -> bool:
    """Whether ``pid`` has libtorch mapped (it imported torch)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any("libtorch" in line for line in f)
    except OSError:
        return False


def _reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of ``pids`` that are our exited children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def end_processes(pids: Iterable[int], grace: float = 3.0) -> list[int]:
    """SIGTERM ``pids``, SIGKILL what is still alive after ``grace`` s; reap those we can.

    Returns the pids that had to be signalled at all.
    """
    targets = [p for p in pids if p != os.getpid()]
    signalled: list[int] = []
    for pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    for pid in _wait_gone(signalled, grace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(signalled, grace)
    return signalled


def _wait_gone(pids: list[int], grace: float) -> list[int]:
    """Wait up to ``grace`` s for ``pids`` to exit (reaping ours); those still alive."""
    deadline = time.monotonic() + grace
    alive = pids
    while alive:
        _reap(alive)
        alive = [p for p in alive if _alive(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return alive


def _alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"
