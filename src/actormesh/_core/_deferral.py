"""Holding sends to a process that is being restarted, and releasing them in order.

While the owner brings a dead worker back at the same socket path, calls addressed to it
wait here instead of failing; when the new process is ready (its actors rebuilt) they go
out in the order they were made, and if the restart fails they fail with its reason.

Ordering: ``end`` runs the held sends and clears the path under the same lock ``defer``
takes, so a send made while the queue drains waits for it and goes out after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Deferrals", "Resume"]

log = logging.getLogger("actormesh.runtime")

# Called on the loop thread with None (the process is back) or the error that ended it.
Resume = Callable[[BaseException | None], None]


class Deferrals:
    """Per socket path: is a restart under way, and what waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, list[Resume]] = {}

    def active(self, path: str) -> bool:
        """True while the process at ``path`` is being restarted (any thread, no lock)."""
        return path in self._held

    def begin(self, path: str) -> None:
        """From now on, hold what is sent to ``path``."""
        with self._lock:
            self._held.setdefault(path, [])

    def defer(self, path: str, resume: Resume) -> bool:
        """Hold ``resume`` until ``path`` is back; False (not held) when no restart is on."""
        with self._lock:
            held = self._held.get(path)
            if held is None:
                return False
            held.append(resume)
            return True

    def end(self, path: str, error: BaseException | None) -> None:
        """The restart of ``path`` is over: run what was held, in order (loop thread)."""
        with self._lock:
            for resume in self._held.get(path, []):
                try:
                    resume(error)
                except Exception:
                    log.exception("a send held during a restart failed")
            self._held.pop(path, None)
