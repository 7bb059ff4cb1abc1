"""Actors the observability tests run in real jobs (importable by the workers)."""

from __future__ import annotations

import threading
import time

from actormesh import Actor, current_rank, endpoint

_release = threading.Event()


class Trainer(Actor):
    """Ranks that train in steps; one of them can be made to hang."""

    def __init__(self) -> None:
        self.rank = current_rank().rank

    @endpoint
    def step(self, stuck_rank: int = -1) -> int:
        if self.rank == stuck_rank:
            allreduce_forever()
        time.sleep(0.01)
        return self.rank

    @endpoint
    async def ping(self) -> int:
        return self.rank

    @endpoint
    def fail(self) -> None:
        raise ValueError("on purpose")

    @endpoint
    def say(self, text: str) -> None:
        print(text, flush=True)

    @endpoint
    def numbered(self, count: int) -> None:
        for i in range(count):
            print(f"line {i}", flush=True)

    @endpoint
    def inspect(self) -> int:
        value = self.rank * 10
        breakpoint()
        return value + 1

    @endpoint
    async def inspect_async(self) -> int:
        value = self.rank * 100
        breakpoint()
        return value + 2


def allreduce_forever() -> None:
    """A collective that never completes (until the process ends)."""
    while not _release.wait(0.05):
        pass
