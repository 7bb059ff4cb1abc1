"""Plain synchronous code, no asyncio: every adverb's future has ``.get()``.

A small parameter-server loop: one ``Counter`` actor per process keeps a running total,
the controller sends numbers to all of them, to one of them, and reads the totals back.
``with procs:`` stops the processes at the end, even if the body raises.

Run it with ``python examples/sync_style.py``.
"""

from __future__ import annotations

import os

from actormesh import Actor, current_rank, endpoint, proc_mesh


class Counter(Actor):
    """Adds numbers up; ``def`` endpoints run on the actor's own thread."""

    def __init__(self, start: int) -> None:
        self.total = start

    @endpoint
    def add(self, amount: int) -> int:
        self.total += amount
        return self.total

    @endpoint
    def describe(self) -> str:
        return f"counter {current_rank().rank} in process {os.getpid()}: total {self.total}"


def main() -> None:
    procs = proc_mesh(gpus=2).get()
    with procs:
        counters = procs.spawn("counters", Counter, 100)

        # Every actor: a ValueMesh with one total per actor.
        totals = counters.add.call(5).get(timeout=30)
        print("after add(5) on all:", list(totals.values()))

        # One actor: its plain value.
        print("after add(10) on gpus=1:", counters.slice(gpus=1).add.call_one(10).get())

        # Futures are started at once; wait for them in any order.
        futures = [counters.slice(gpus=0).add.call_one(n) for n in range(1, 4)]
        print("three more adds on gpus=0:", [future.get() for future in futures])

        for text in counters.describe.call().get().values():
            print(text)
    print("processes stopped")


if __name__ == "__main__":
    main()
