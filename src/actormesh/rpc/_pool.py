"""The RPC thread pool: where incoming calls run.

Like ``concurrent.futures.ThreadPoolExecutor`` but lighter (a job is a queue entry, not a
future) and made of daemon threads: an RPC still running when the program exits (a
function blocked forever, say) must not keep the process alive, as the executor's
non-daemon threads would.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WorkerPool"]

log = logging.getLogger("actormesh.rpc")

_STOP = None


class WorkerPool:
    """Up to ``size`` threads, started as jobs need them, each taking jobs in turn.

    Args:
        size: the most threads (torch's ``num_worker_threads``).
        name: prefix of the threads' names.
    """

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a job
        self._waiting = 0  # jobs no thread has taken yet
        self._closed = False

    @property
    def size(self) -> int:
        """The most threads this pool runs."""
        return self._size

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a pool thread; an exception it raises is logged.

        A new thread starts whenever more jobs wait than threads are idle (up to
        ``size``), so a slow job never holds up the next one while the pool can grow.

        Raises:
            RuntimeError: the pool was shut down.
        """
        thread = None
        with self._lock:
            if self._closed:
                raise RuntimeError("the RPC thread pool has shut down")
            self._waiting += 1
            if self._waiting > self._idle and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._main, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                self._idle += 1
        self._jobs.put((fn, args))
        if thread is not None:
            thread.start()

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                if job is not _STOP:
                    self._waiting -= 1
            if job is _STOP:
                return
            fn, args = job
            try:
                fn(*args)
            except BaseException:
                log.exception("an RPC job failed")
            del job, fn, args
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        """Let threads finish their current job and stop; queued jobs still run first."""
        with self._lock:
            self._closed = True
            count = len(self._threads)
        for _ in range(count):
            self._jobs.put(_STOP)
