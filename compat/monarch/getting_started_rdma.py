"""The point-to-point RDMA part of Monarch's docs example ``getting_started.py``.

A parameter server registers its weights as an ``RDMABuffer`` (a view, no copy) and
returns the buffer from an endpoint; a worker in another process, handed the server's
mesh as an endpoint argument, fetches that small reference and then pulls the bytes
with ``read_into``. The worker's copy must equal the server's weights, and a second
sync after the server changed its weights must see the change.
"""

from __future__ import annotations

import torch
from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import RDMABuffer


class ParameterServer(Actor):
    def __init__(self):
        torch.manual_seed(0)
        self.weights = torch.rand(200, 300)
        self.weight_buffer = RDMABuffer(self.weights.view(torch.uint8).flatten())

    @endpoint
    def get_weights(self) -> RDMABuffer:
        return self.weight_buffer

    @endpoint
    def checksum(self) -> float:
        return float(self.weights.sum())

    @endpoint
    def perturb(self) -> None:
        self.weights.add_(1.0)  # in place: the registered memory itself changes


class Worker(Actor):
    def __init__(self):
        self.local_weights = torch.zeros(200, 300)

    @endpoint
    def sync_weights(self, server: ParameterServer) -> float:
        weight_ref = server.get_weights.call_one().get()
        assert weight_ref.size() == 200 * 300 * 4
        weight_ref.read_into(self.local_weights.view(torch.uint8).flatten()).get()
        return float(self.local_weights.sum())


server = this_host().spawn_procs(per_host={"gpus": 1}).spawn("server", ParameterServer)
worker = this_host().spawn_procs(per_host={"gpus": 1}).spawn("worker", Worker)

expected = server.checksum.call_one().get()
got = worker.sync_weights.call_one(server).get()
print(f"server checksum {expected:.3f}, worker checksum after read_into {got:.3f}")
assert got == expected and got > 0

server.perturb.call_one().get()
expected = server.checksum.call_one().get()
got = worker.sync_weights.call_one(server).get()
print(f"after perturb: server {expected:.3f}, worker {got:.3f}")
assert got == expected
print("getting started: RDMA weights OK")
