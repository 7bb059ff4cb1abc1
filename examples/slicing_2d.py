"""Slicing a two-dimensional mesh: named dimensions, indexing, split, flatten, rename.

A process mesh of shape ``{dp=2, tp=2}`` (data parallel x tensor parallel) hosts one
``Worker`` per process. Each view of the actor mesh below is a handle on some of the same
four actors; calling an endpoint on a view reaches only those actors.

Run it with ``python examples/slicing_2d.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actormesh import Actor, ActorMesh, context, endpoint, proc_mesh


class Worker(Actor):
    """Answers with its coordinates in the mesh it was spawned in.

    ``context().actor_instance.rank`` is the actor's place in its whole mesh;
    ``current_rank()`` would be its place in the slice the call was made on.
    """

    @endpoint
    async def where(self) -> str:
        point = context().actor_instance.rank
        return f"rank {point.rank} at {dict(point)}"


async def show(title: str, view: ActorMesh[Any]) -> None:
    """Call ``where`` on every actor of ``view`` and print what each one said."""
    results = await view.where.call()
    print(f"{title}: shape {view.shape}, {len(results)} actor(s)")
    for point, text in results.items():
        print(f"    {dict(point)} -> {text}")


async def main() -> None:
    async with await proc_mesh({"dp": 2, "tp": 2}) as procs:
        workers = await procs.spawn("workers", Worker)

        await show("whole mesh", workers)
        await show("slice(dp=1)", workers.slice(dp=1))
        await show("slice(tp=0)", workers.slice(tp=0))
        await show("mesh[1, :]", workers[1, :])
        flat = workers.flatten("rank")
        await show("flatten('rank')", flat)
        await show("flatten, then split(rank={'x': 2, 'y': 2})", flat.split(rank={"x": 2, "y": 2}))
        await show("rename(dp='replica')", workers.rename(dp="replica"))

        # A single actor: call_one gives its plain value rather than a ValueMesh.
        print("mesh[1, 0]:", await workers[1, 0].where.call_one())

        # A ValueMesh is indexed by coordinates too.
        everyone = await workers.where.call()
        print("item(dp=0, tp=1):", everyone.item(dp=0, tp=1))
        print("values[1, 1]:", everyone[1, 1])

        # Bad coordinates fail at once, before anything is sent.
        bad_views = {
            "workers.slice(pp=0)": lambda: workers.slice(pp=0),
            "workers[2, 0]": lambda: workers[2, 0],
        }
        for text, make_view in bad_views.items():
            try:
                make_view()
            except (ValueError, IndexError) as error:
                print(f"{text} -> {type(error).__name__}: {error}")


if __name__ == "__main__":
    asyncio.run(main())
