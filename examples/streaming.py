"""Results as they arrive (``stream``), one actor of many (``choose``), and ``broadcast``.

Four ``Sleeper`` actors take different times to answer; ``stream`` yields each answer as
soon as it arrives, so the fastest come first. ``choose`` sends a call to one actor of the
mesh, and ``broadcast`` sends to all of them without waiting for replies.

Run it with ``python examples/streaming.py``.
"""

from __future__ import annotations

import asyncio

from actormesh import Actor, current_rank, endpoint, proc_mesh


class Sleeper(Actor):
    """Naps for a time that depends on its rank, then says who it is."""

    def __init__(self) -> None:
        self.rank = current_rank().rank
        self.notes: list[str] = []

    @endpoint
    async def nap(self, unit: float) -> str:
        # Rank 0 sleeps longest, so results arrive in reverse rank order.
        await asyncio.sleep(unit * (3 - self.rank))
        return f"rank {self.rank} woke up"

    @endpoint
    async def note(self, text: str) -> None:
        self.notes.append(text)

    @endpoint
    async def notes_seen(self) -> list[str]:
        return self.notes


async def main() -> None:
    procs = await proc_mesh(gpus=4)
    sleepers = await procs.spawn("sleepers", Sleeper)

    print("stream, in arrival order:")
    for future in sleepers.nap.stream(0.2):  # one future per actor, first to arrive first
        print(f"    {await future}")

    print("choose picked:", await sleepers.nap.choose(0.0))

    # Fire and forget; a later call to the same actors runs after it (calls from one
    # sender to one actor are handled in send order).
    sleepers.note.broadcast("hello everyone")
    seen = await sleepers.notes_seen.call()
    print("every actor got the broadcast:", all(n == ["hello everyone"] for n in seen.values()))

    await procs.stop()


if __name__ == "__main__":
    asyncio.run(main())
