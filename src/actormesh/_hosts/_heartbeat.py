"""Heartbeats: how an owner notices a worker that is alive but no longer answering.

A worker that exits is seen at once through its pidfd; one that is frozen (SIGSTOP, a
debugger, a deadlocked event loop) is not. The owner's loop sends each worker a PING every
``interval`` seconds and the worker answers PONG from its own event loop, never from an
actor's thread, so a long ``def`` endpoint does not delay the answer. A worker silent for
longer than ``timeout`` is declared dead: the owner kills it, and from there on it is an
ordinary death (pending calls fail, the owner's supervision hears of it once).

What the default timeout (``Config.heartbeat_timeout``, 30 s) protects: a worker whose
thread holds the GIL inside one long C call (a big ``torch`` operation, a C extension that
never releases it) cannot run its loop either, so it misses heartbeats while being
perfectly healthy. Such calls of up to 15 s must not get a worker killed; 30 s leaves twice
that. Programs that want faster detection of frozen workers set a smaller timeout (the
fault tests use about a second).

A worker stopped at a breakpoint is held (``hold``): a debugger prompt inside an
``async`` endpoint blocks its event loop for as long as the person at it thinks, and that
silence is no death. Its probes go on; only the verdict waits until it resumes.

The monitor also guards against its own stalls: if the owner's loop could not run for a
while (its process was stopped, or starved of the GIL), the silence was the owner's, and
the workers get that time back instead of being blamed for it.

For local workers the message says what the process was doing when it was declared dead,
read from ``/proc/<pid>/stat``: stopped by a signal (``T``, frozen) or running (busy).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ._process import ChildProcess
from ._reaper import process_state

__all__ = ["HeartbeatMonitor"]

log = logging.getLogger("actormesh.heartbeat")

_STATES = {
    "R": "running (busy: its event loop is blocked, e.g. a C call holding the GIL)",
    "S": "sleeping (its event loop is blocked)",
    "D": "in uninterruptible I/O",
    "T": "stopped by a signal (frozen)",
    "t": "stopped by a debugger (frozen)",
    "Z": "exiting",
}


@dataclass
class _Watched:
    child: ChildProcess
    last_answer: float
    seq: int = 0


class HeartbeatMonitor:
    """Probes the workers of one owner from its loop thread; see the module docstring.

    Args:
        loop: the owner's event loop; every method runs on its thread.
        interval: seconds between probes.
        timeout: seconds of silence after which a worker is declared dead.
        probe: sends a PING with this sequence number to the child; False if it cannot.
        declare_dead: called once for a silent child, with the reason.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        interval: float,
        timeout: float,
        probe: Callable[[ChildProcess, int], bool],
        declare_dead: Callable[[ChildProcess, str], None],
    ) -> None:
        self._loop = loop
        self.timeout = timeout
        # Several probes per timeout, so one delayed answer is not the end of a worker.
        self.interval = min(interval, timeout / 4)
        self._probe = probe
        self._declare_dead = declare_dead
        self._watched: dict[str, _Watched] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_tick = 0.0
        self._held: dict[str, int] = {}  # path -> breakpoint sessions open in it

    def track(self, child: ChildProcess) -> None:
        """Start watching ``child`` (it has just joined)."""
        self._watched[child.listen_path] = _Watched(child, self._loop.time())
        if self._timer is None:
            self._last_tick = self._loop.time()
            self._timer = self._loop.call_later(self.interval, self._tick)

    def untrack(self, child: ChildProcess) -> None:
        """Stop watching ``child`` (it exited or is being stopped)."""
        watched = self._watched.get(child.listen_path)
        if watched is not None and watched.child is child:
            del self._watched[child.listen_path]

    def answered(self, path: str) -> None:
        """A PONG came from the worker listening at ``path``."""
        watched = self._watched.get(path)
        if watched is not None:
            watched.last_answer = self._loop.time()

    def hold(self, path: str, held: bool) -> None:
        """A debugger session in the worker at ``path`` opened (``held``) or closed:
        while one is open, its silence does not make it dead."""
        count = self._held.get(path, 0) + (1 if held else -1)
        if count > 0:
            self._held[path] = count
        else:
            self._held.pop(path, None)
        watched = self._watched.get(path)
        if watched is not None:
            watched.last_answer = self._loop.time()  # the silence starts counting now

    def close(self) -> None:
        """Stop probing."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._watched.clear()

    def _tick(self) -> None:
        now = self._loop.time()
        stalled = now - self._last_tick - self.interval
        self._last_tick = now
        if stalled > self.interval:
            # We could not listen for `stalled` seconds: nobody missed a beat meanwhile.
            for watched in self._watched.values():
                watched.last_answer += stalled
        for watched in list(self._watched.values()):
            child = watched.child
            if child.listen_path in self._held:
                watched.last_answer = now
            silent = now - watched.last_answer
            if silent > self.timeout and child.alive():
                self.untrack(child)
                self._declare_dead(child, self._describe(child, silent))
                continue
            watched.seq += 1
            if not self._probe(child, watched.seq):
                log.debug("cannot probe worker %s yet", child.pid)
        self._timer = self._loop.call_later(self.interval, self._tick) if self._watched else None

    def _describe(self, child: ChildProcess, silent: float) -> str:
        # /proc only knows processes of this host; a remote worker's pid means nothing here.
        local = child.local
        state = process_state(child.pid) if local else None
        if state:
            doing = _STATES.get(state, f"in state {state}")
        else:
            doing = "gone" if local else "on another host"
        return (
            f"stopped answering heartbeats for {silent:.1f} s (limit {self.timeout:g} s, "
            f"Config.heartbeat_timeout) while {doing}; the owner killed it"
        )
