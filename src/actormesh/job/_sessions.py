"""Ending the processes of a job's hosts started on this machine, wherever they are in
their tree.

A host of a ``ProcessJob`` is a worker loop started in a session of its own; what it
starts (its agent, the agent's fork server and workers, their children) is found by
walking ``/proc`` from it, and the loop's own session is matched too, so a process that
left the tree (re-parented to init) is still found. The controller that ends the job
need not be the one that started it: processes are watched with pidfds, not ``wait``.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterable

__all__ = ["end_sessions", "live_in_sessions"]


def live_in_sessions(leaders: Iterable[int]) -> list[int]:
    """Live (not zombie) processes in the sessions of ``leaders`` or under them."""
    leaders = set(leaders)
    children: dict[int, list[int]] = {}
    in_session: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        state, ppid, session = fields[0], int(fields[1]), int(fields[3])
        if state in ("Z", "X"):
            continue
        children.setdefault(ppid, []).append(pid)
        if session in leaders or pid in leaders:
            in_session.add(pid)
    found = set(in_session)
    stack = list(in_session)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(os.getpid())
    return sorted(found)


def end_sessions(leaders: Iterable[int], grace: float) -> None:
    """SIGTERM every process of ``leaders``' sessions and trees, wait up to ``grace``
    seconds for them to exit, then SIGKILL whatever is left and wait for it to go."""
    leaders = list(leaders)
    _signal_all(live_in_sessions(leaders), signal.SIGTERM)
    _wait_gone(live_in_sessions(leaders), grace)
    left = live_in_sessions(leaders)
    _signal_all(left, signal.SIGKILL)
    _wait_gone(left, 5.0)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout: float) -> None:
    """Wait until each of ``pids`` has exited (its pidfd readable), up to ``timeout``."""
    poller = select.poll()
    fds = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        fds.append(fd)
        poller.register(fd, select.POLLIN)
    try:
        deadline = time.monotonic() + timeout
        waiting = len(fds)
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                waiting -= 1
    finally:
        for fd in fds:
            os.close(fd)
