"""Actors that use ports and channels, for the multi-host tests."""

from __future__ import annotations

import os
from typing import Any

from actormesh.actor import Actor, Channel, Port, context, endpoint


class Relay(Actor):
    """Sends to ports it is given, and opens channels of its own."""

    def __init__(self) -> None:
        self.port: Port[Any]
        self.port, self.receiver = Channel.open()

    @endpoint
    def my_port(self) -> Port[Any]:
        return self.port

    @endpoint
    def send_many(self, port: Port[Any], count: int) -> None:
        rank = context().actor_instance.rank.rank
        for i in range(count):
            port.send((rank, i, os.uname().nodename))

    @endpoint
    async def receive(self, count: int) -> list[Any]:
        return [await self.receiver.recv() for _ in range(count)]
