"""Process-tree housekeeping on Linux: no orphans, no zombies.

A worker makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): a process its
actors started that loses its own parent (a daemon started by a shell, say) is re-parented
to the worker instead of to init. So every descendant stays findable by walking
``/proc/<pid>/task/<tid>/children``, and the worker can kill the whole tree on its way out.

Adopted processes are the worker's children now, so their exit statuses are the worker's
to collect: ``OrphanReaper`` reaps them. It must never reap a child the actor code started
itself (that would steal the exit status its ``subprocess.Popen`` waits for), so it only
reaps children it can tell were adopted (see the class). An adopted process it cannot
tell apart (same session, born and orphaned within one look) stays a zombie until the
worker exits.

The owner side uses ``kill_tagged``: when a worker died too abruptly to clean up (SIGKILL),
the processes it started still carry its ``ACTORMESH_KEY`` in their environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

__all__ = [
    "OrphanReaper",
    "become_subreaper",
    "children_of",
    "descendants_of",
    "kill_tagged",
    "kill_tree",
    "process_state",
]

_PR_SET_CHILD_SUBREAPER = 36
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def become_subreaper() -> bool:
    """Adopt this process' orphaned descendants; False where the kernel refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name.

    Index 0 is the state, 1 the parent, 2 the process group, 3 the session, 19 the start
    time in clock ticks since boot (proc(5) numbers them from 3).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``R``, ``S``, ``D``, ``T``, ``Z``...); None if gone."""
    fields = _stat_fields(pid)
    return fields[0].decode() if fields else None


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's), adopted ones included."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as listing:
                found.extend(int(child) for child in listing.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants_of(pid: int) -> list[int]:
    """Every descendant of ``pid``, parents before their children."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def kill_tree(include_group: bool = True) -> None:
    """SIGKILL every descendant of this process (and the rest of its process group)."""
    me = os.getpid()
    victims = set(descendants_of(me))
    if include_group:
        group = os.getpgid(0)
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                fields = _stat_fields(int(entry))
                if fields is not None and len(fields) > 2 and int(fields[2]) == group:
                    victims.add(int(entry))
    victims.discard(me)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def kill_tagged(name: str, value: str) -> int:
    """SIGKILL every process whose environment has ``name=value``; returns how many."""
    wanted = f"{name}={value}".encode()
    me, killed = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if wanted not in environ.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):
            continue
    return killed


def _uptime_ticks() -> float:
    with open("/proc/uptime", "rb") as uptime:
        return float(uptime.read().split()[0]) * _CLOCK_TICKS


class OrphanReaper:
    """Reaps the zombies of processes this (subreaper) process adopted; see the module doc.

    A new child counts as adopted when it was seen deeper in the tree before (a
    grandchild whose parent died), when it is older than the previous look (so it was
    someone else's child then), or when it runs in another session (a daemon: the actor
    code's own children share the worker's session unless started with a new one). Call
    ``tick()`` now and then (the worker does so every second on its loop).
    """

    def __init__(self) -> None:
        self._me = os.getpid()
        self._session = os.getsid(0)
        self._known: set[int] = set(children_of(self._me))
        self._below: set[int] = set()  # descendants that were not our children
        self._adopted: set[int] = set()
        self._last_look = _uptime_ticks()

    def tick(self) -> int:
        """Reap the adopted children that have exited; returns how many."""
        now = _uptime_ticks()
        tree = descendants_of(self._me)
        children = set(children_of(self._me))
        for pid in children - self._known:
            if pid in self._below or self._looks_adopted(pid):
                self._adopted.add(pid)
        reaped = 0
        for pid in list(self._adopted):
            state = process_state(pid)
            if state is None:
                self._adopted.discard(pid)
            elif state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                self._adopted.discard(pid)
                reaped += 1
        self._known = children
        self._below = set(tree) - children
        self._last_look = now
        return reaped

    def _looks_adopted(self, pid: int) -> bool:
        fields = _stat_fields(pid)
        if fields is None or len(fields) <= 19:
            return False
        older = int(fields[19]) < self._last_look
        return older or int(fields[3]) != self._session
