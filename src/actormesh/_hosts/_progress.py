"""Progress of long operations, on one line of stderr, only where a person watches.

Spawning many processes and a stop that waits for them (here), and weight sync, show
``spawning 64 processes: 37 joined (4.1 s)`` once they have taken more than ``DELAY``
seconds, redrawn in place a few times a second and erased when done. By default
(``Config.progress = "auto"``) only when stderr is a terminal: never into a log file, a
pipe or a notebook cell; ``"always"`` asks for it anyway (plain lines where stderr is no
terminal), ``"never"`` turns it off. Runs on the event loop that does the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

__all__ = ["Progress"]

DELAY = 2.0  # seconds an operation runs before it shows progress
_EVERY = 0.25


def _wanted(mode: str) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """One operation's progress line (see the module docstring).

    Args:
        loop: the loop the operation runs on (``update`` and ``done`` on its thread).
        what: ``"spawning 64 processes"``.
        unit: what is counted (``"joined"``).
        total: how many there are.
        mode: ``Config.progress``.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, what: str, unit: str, total: int, mode: str
    ) -> None:
        self._what, self._unit, self._total = what, unit, total
        self._count = 0
        self._start = time.monotonic()
        self._tty = _tty()
        self._shown = False
        self._timer: asyncio.TimerHandle | None = None
        if _wanted(mode):
            self._timer = loop.call_later(DELAY, self._tick, loop)

    def update(self, count: int) -> None:
        """``count`` of ``total`` are done."""
        self._count = count

    def _line(self) -> str:
        elapsed = time.monotonic() - self._start
        return f"{self._what}: {self._count}/{self._total} {self._unit} ({elapsed:.1f} s)"

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._shown = True
        _write(("\r\x1b[2K" if self._tty else "") + self._line() + ("" if self._tty else "\n"))
        self._timer = loop.call_later(_EVERY if self._tty else 2.0, self._tick, loop)

    def done(self) -> None:
        """The operation ended: erase the line (or say so, where lines stay)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._shown:
            self._count = max(self._count, 0)
            _write("\r\x1b[2K" if self._tty else self._line() + " done\n")


def _tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _write(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text)
        sys.stderr.flush()
