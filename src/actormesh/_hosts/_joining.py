"""What allocators of remote processes share: waiting for joins, ordering, environments.

Remote processes dial the controller and say HELLO; the runtime hands each one it did not
start to the waiters registered with ``runtime.children.joins``. `JoinWait` is such a waiter: it
collects the processes an allocator expects (by key, or any ``count`` of them) and lets
the allocator await them with a timeout. Everything here runs on the runtime's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core import headers
from .._transport import TransportClosed
from ._remote import Joined

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["JoinWait", "is_agent", "join_order"]


class JoinWait:
    """Collects joining processes for one allocation.

    Args:
        runtime: the controller's runtime.
        count: how many to collect.
        accept: which joining processes are ours (default: any).
    """

    def __init__(
        self, runtime: Runtime, count: int, accept: Callable[[Joined], bool] | None = None
    ) -> None:
        self._runtime = runtime
        self._count = count
        self._accept = accept or (lambda joined: True)
        self.joined: list[Joined] = []
        self._full: asyncio.Event = asyncio.Event()
        self._stop = runtime.children.joins.wait(self._take)

    def _take(self, joined: Joined) -> bool:
        if self._full.is_set() or not self._accept(joined):
            return False
        self.joined.append(joined)
        if len(self.joined) >= self._count:  # (pruning on every join is quadratic)
            self._prune()
        return True

    def _prune(self) -> None:
        # A process that left before the allocation was complete does not count.
        self.joined = [j for j in self.joined if not j.conn.closed]
        if len(self.joined) >= self._count:
            self._full.set()

    async def wait(self, timeout: float | None, what: str) -> list[Joined]:
        """The processes, once ``count`` live ones joined; stops taking more.

        Raises:
            TimeoutError: fewer joined within ``timeout`` seconds (``what`` says where
                they were expected to join).
        """
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while True:
            left = None if deadline is None else deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(self._full.wait(), left)
            except TimeoutError:
                self._prune()
                raise TimeoutError(
                    f"{len(self.joined)} of {self._count} processes joined {what} "
                    f"within {timeout:g} s"
                ) from None
            self._prune()  # one may have left just as the last one came
            if self._full.is_set():
                self._stop()
                return self.joined
            self._full.clear()

    def close(self, send_away: bool = True) -> None:
        """Stop taking processes; with ``send_away``, tell the collected ones to exit."""
        self._stop()
        if send_away:
            for joined in self.joined:
                with contextlib.suppress(TransportClosed):
                    joined.conn.send([headers.encode(headers.Shutdown())])
                joined.conn.close()


def join_order(joined: Sequence[Joined]) -> list[Joined]:
    """Processes in rank order: by the rank each asked for, then host by host.

    Processes that ask for no rank come after those that do, grouped by host and ordered
    by their index on the host, so the ``hosts`` dimension of a mesh falls on real hosts
    when each host contributes the same number of processes.
    """

    def key(j: Joined) -> tuple[Any, ...]:
        rank = j.info.get("rank")
        local = j.info.get("local_rank")
        return (
            rank is None,
            rank if rank is not None else 0,
            str(j.info.get("host", "")),
            j.address.rpartition(":")[0],
            local if local is not None else 0,
            j.pid,
        )

    return sorted(joined, key=key)


def is_agent(joined: Joined) -> bool:
    """Whether a joining process is a host agent (``actormesh host``), not a worker."""
    return joined.info.get("role") == "agent"
