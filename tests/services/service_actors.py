"""Actors of the service tests; workers import them by module name (see conftest)."""

from __future__ import annotations

import os
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
        if os.getpid() in pids:
            self.release.wait(120)
            self.release.clear()
        return self._me(x)

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
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def boom(self) -> None:
        raise ValueError("boom")
