"""Ping-pong between two actor meshes: the second program of the Monarch actor tutorial.

Each actor of ``actor_0`` holds a reference to the whole ``actor_1`` mesh, picks its peer
with the same coordinates (``other_actor.slice(**current_rank())``) and calls it directly,
process to process; and the other way round. Only the imports differ from the tutorial.

Run it with ``python examples/ping_pong.py``; it prints::

    Pong!, Receiver (actor_1:0) received msg Sender (actor_0:0) msg='Ping'
    Pong!, Receiver (actor_1:1) received msg Sender (actor_0:1) msg='Ping'
    Pong!, Receiver (actor_0:0) received msg Sender (actor_1:0) msg='Ping'
    Pong!, Receiver (actor_0:1) received msg Sender (actor_1:1) msg='Ping'

(each line prefixed with the mesh name and coordinates of the actor that printed it).
"""

from __future__ import annotations

import asyncio

from actormesh.actor_mesh import Actor, current_rank, endpoint
from actormesh.proc_mesh import proc_mesh


class ExampleActor(Actor):
    def __init__(self, actor_name):
        self.actor_name = actor_name

    @endpoint
    async def init(self, other_actor):
        self.other_actor = other_actor
        self.other_actor_pair = other_actor.slice(**current_rank())
        self.identity = current_rank().rank

    @endpoint
    async def send(self, msg):
        await self.other_actor_pair.recv.call(f"Sender ({self.actor_name}:{self.identity}) {msg=}")

    @endpoint
    async def recv(self, msg):
        print(f"Pong!, Receiver ({self.actor_name}:{self.identity}) received msg {msg}")


async def main() -> None:
    # Two meshes of two actors each, in two different process meshes.
    local_mesh_0 = await proc_mesh(gpus=2)
    actor_0 = await local_mesh_0.spawn("actor_0", ExampleActor, "actor_0")
    local_mesh_1 = await proc_mesh(gpus=2)
    actor_1 = await local_mesh_1.spawn("actor_1", ExampleActor, "actor_1")

    # Give each mesh a reference to the other.
    await asyncio.gather(
        actor_0.init.call(actor_1),
        actor_1.init.call(actor_0),
    )

    # Ping from actor_0, then from actor_1.
    await actor_0.send.call("Ping")
    await actor_1.send.call("Ping")

    await asyncio.gather(local_mesh_0.stop(), local_mesh_1.stop())


if __name__ == "__main__":
    asyncio.run(main())
