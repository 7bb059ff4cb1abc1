"""Actors the telemetry tests (metrics, event log, timelines, native stacks) run in real
processes (importable by the workers)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading

from actormesh import Actor, current_rank, endpoint
from actormesh.observability import Reduce, record_metric


class Recorder(Actor):
    """Each rank records metrics derived from its rank and the step."""

    def __init__(self) -> None:
        self.rank = current_rank().rank
        self.held = asyncio.Event()

    @endpoint
    async def hold(self) -> None:
        # Runs until ``release``: calls sent after it wait in the mailbox meanwhile.
        await self.held.wait()
        self.held.clear()

    @endpoint(concurrent=True)
    async def release(self) -> None:
        self.held.set()

    @endpoint
    def train_step(self, step: int) -> None:
        # Two values per rank per step, so reductions see more than one value per rank.
        for value in (self.rank + step, self.rank + step + 0.5):
            record_metric("loss", value, Reduce.MEAN)
            record_metric("tokens", value, Reduce.SUM)
            record_metric("reward/max", value, Reduce.MAX)
            record_metric("reward/min", value, Reduce.MIN)
            record_metric("reward/std", value, "std")

    @endpoint
    async def record_async(self, key: str, value: float) -> None:
        record_metric(key, value, Reduce.SUM)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def wait_forever(self) -> None:
        threading.Event().wait()

    @endpoint
    def echo(self, payload: bytes) -> int:
        return len(payload)

    @endpoint
    def sleep_in_c(self, seconds: int) -> None:
        # A blocking C call that holds the GIL: libc's sleep(3) through ctypes.PyDLL
        # (which, unlike CDLL, keeps the GIL). The whole process stops running Python,
        # its event loop included: only native stacks can say where it is.
        ctypes.PyDLL(None).sleep(seconds)
