"""Actors of the service tests; workers import them by module name (see conftest)."""

from __future__ import annotations

import asyncio
import os
import select
import threading
from typing import Any

from actormesh import Actor, current_rank, endpoint


class Replicated(Actor):
    """Answers with who it is: its rank in the replica, its pid, and its weights."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self.version = -1
        self.seen: list[Any] = []
        self.release = threading.Event()
        self.arrived = threading.Event()  # a holding call is running here

    def _me(self, x: Any) -> dict[str, Any]:
        return {"rank": current_rank().rank, "pid": os.getpid(), "x": x, "version": self.version}

    @endpoint
    def who(self, x: Any = None) -> dict[str, Any]:
        self.seen.append(x)
        return self._me(x)

    @endpoint
    def history(self) -> list[Any]:
        return list(self.seen)

    @endpoint
    def load(self, version: int) -> None:
        self.version = version

    @endpoint
    def load_in(self, version: int, block: int, pids: list[int]) -> None:
        """Takes ``version``; blocks first (as `hold`) when it is ``block``, in ``pids``."""
        if version == block and os.getpid() in pids:
            self.release.wait(120)
            self.release.clear()
        self.version = version

    @endpoint
    def hold(self, x: Any) -> dict[str, Any]:
        """Blocks until `let_go` (from another caller) or a death: a call in flight."""
        self.seen.append(x)
        self.release.wait(120)
        self.release.clear()
        return self._me(x)

    @endpoint(idempotent=True)
    def hold_in(self, x: Any, pids: list[int]) -> dict[str, Any]:
        """Idempotent; blocks (as `hold`) only in the processes ``pids``."""
        self.seen.append(x)
        self.arrived.set()
        if os.getpid() in pids:
            self.release.wait(120)
            self.release.clear()
        return self._me(x)

    @endpoint(concurrent=True)
    async def wait_for_call(self) -> None:
        """Returns once a `hold_in` call has reached this actor (concurrent: it runs
        beside the call, which may be blocked)."""
        await asyncio.to_thread(self.arrived.wait, 120)

    @endpoint(concurrent=True)
    async def let_go(self) -> None:
        """Ends the `hold` running now (concurrent: it runs beside it)."""
        self.release.set()

    @endpoint
    def group(self, x: float) -> dict[str, Any]:
        """A collective inside the replica: every rank adds its part."""
        import torch
        import torch.distributed as dist

        rank = dist.get_rank()
        total = torch.tensor([x * (rank + 1)])
        dist.all_reduce(total)
        return {"sum": float(total.item()), "world": dist.get_world_size(), "rank": rank}

    @endpoint
    def fail_when_gone(self, pid: int) -> None:
        """Raises once process ``pid`` (a peer of this replica) is gone, as a collective
        with a dead peer does; waits on its pidfd, so no polling."""
        if os.getpid() == pid:
            self.release.wait(120)  # the peer itself: blocked until it is killed
            return
        fd = os.pidfd_open(pid)
        try:
            select.select([fd], [], [], 120)
        finally:
            os.close(fd)
        raise RuntimeError(f"peer {pid} is gone")

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def boom(self) -> None:
        raise ValueError("boom")


class FailsOnceMarked(Replicated):
    """Its ``__init__`` raises (once) while the file ``marker`` exists: a rebuild that
    fails the first time."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        try:
            os.remove(marker)
        except FileNotFoundError:
            return
        raise RuntimeError("marked to fail once")


class Unbuildable(Actor):
    """Its ``__init__`` raises on rank 1 of a replica."""

    def __init__(self) -> None:
        if current_rank().rank == 1:
            raise ValueError("cannot build rank 1")

    @endpoint
    def ping(self) -> None:
        pass
