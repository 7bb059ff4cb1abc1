"""Actors that own registered buffers and actors that read and write them."""

from __future__ import annotations

import os
from typing import Any

import torch

from actormesh.actor import Actor, endpoint
from actormesh.rdma import RDMABuffer


class Owner(Actor):
    """Holds a tensor and hands out an ``RDMABuffer`` of it."""

    def __init__(self, numel: int) -> None:
        self.weights = torch.arange(numel, dtype=torch.float32)
        self.buffer = RDMABuffer(self.weights.view(torch.uint8).flatten())

    @endpoint
    def handle(self) -> RDMABuffer:
        return self.buffer

    @endpoint
    def bump(self, by: float) -> None:
        self.weights += by

    @endpoint
    def weights_now(self) -> torch.Tensor:
        return self.weights.clone()

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Reader(Actor):
    """Reads a buffer someone else owns into its own tensor, and writes into it."""

    @endpoint
    async def read(self, buffer: RDMABuffer, numel: int) -> torch.Tensor:
        local = torch.zeros(numel, dtype=torch.float32)
        await buffer.read_into(local.view(torch.uint8).flatten())
        return local

    @endpoint
    def read_sync(self, buffer: RDMABuffer, numel: int) -> torch.Tensor:
        local = torch.zeros(numel, dtype=torch.float32)
        buffer.read_into(local.view(torch.uint8).flatten()).get(timeout=30)
        return local

    @endpoint
    async def write(self, buffer: RDMABuffer, values: Any) -> None:
        source = torch.as_tensor(values, dtype=torch.float32)
        await buffer.write_from(source.view(torch.uint8).flatten())
