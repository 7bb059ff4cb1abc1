"""Hello world over four actors: the first program of the Monarch actor tutorial.

Only the imports differ from the tutorial: ``actormesh.proc_mesh`` and
``actormesh.actor_mesh`` take the place of ``monarch.proc_mesh`` and
``monarch.actor_mesh`` (the same names are also in ``actormesh`` itself), and the
notebook's top-level ``await`` runs inside ``asyncio.run(main())``.

Run it with ``python examples/hello_world.py``.
"""

from __future__ import annotations

import asyncio

from actormesh.actor_mesh import Actor, current_rank, endpoint
from actormesh.proc_mesh import ProcMesh, proc_mesh

NUM_ACTORS = 4


class ToyActor(Actor):
    def __init__(self):
        self.rank = current_rank().rank

    @endpoint
    async def hello_world(self, msg):
        print(f"Identity: {self.rank}, {msg=}")


async def main() -> None:
    # A mesh of local processes, one per "gpu" (just a dimension name without GPUs).
    local_proc_mesh: ProcMesh = await proc_mesh(gpus=NUM_ACTORS)
    # Four ToyActor instances, one in each process.
    toy_actor = await local_proc_mesh.spawn("toy_actor", ToyActor)

    # Every instance at once.
    await toy_actor.hello_world.call("hey there, from jupyter!!")

    # One instance at a time, all in flight together.
    futures = []
    for idx in range(NUM_ACTORS):
        actor_instance = toy_actor.slice(gpus=idx)
        futures.append(
            actor_instance.hello_world.call_one(f"Here's an arbitrary unique value: {idx}")
        )
    await asyncio.gather(*futures)

    await local_proc_mesh.stop()


if __name__ == "__main__":
    asyncio.run(main())
