"""Conformance program for the point-to-point RDMA section of Monarch's docs example
``getting_started.py``: a small handle on the control path, the bytes on the data path.

A ``Vault`` registers a float64 table as an ``RDMABuffer`` over the table's own memory
(a byte view, no copy) and hands that buffer out from an endpoint. A ``Mirror`` in
another process is given the vault's mesh as an endpoint argument; it asks for the
handle, checks its size, and pulls the bytes into its own table with
``read_into(...).get()``. Its copy must match the vault's table exactly, and after the
vault changes the table in place a second pull must bring the change over.
"""

from __future__ import annotations

import torch
from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import RDMABuffer

ROWS, COLS = 64, 48


def as_bytes(table: torch.Tensor) -> torch.Tensor:
    return table.view(torch.uint8).reshape(-1)


class Vault(Actor):
    def __init__(self):
        self.table = torch.linspace(-1.0, 1.0, ROWS * COLS, dtype=torch.float64).reshape(ROWS, COLS)
        self.handle = RDMABuffer(as_bytes(self.table))

    @endpoint
    def lend(self) -> RDMABuffer:
        return self.handle

    @endpoint
    def contents(self) -> list[float]:
        return self.table.flatten().tolist()

    @endpoint
    def rescale(self, factor: float) -> None:
        self.table.mul_(factor)  # in place: the registered bytes change


class Mirror(Actor):
    def __init__(self):
        self.table = torch.full((ROWS, COLS), float("nan"), dtype=torch.float64)

    @endpoint
    def pull(self, vault: Vault) -> list[float]:
        handle = vault.lend.call_one().get()
        assert handle.size() == ROWS * COLS * 8, handle.size()
        handle.read_into(as_bytes(self.table)).get()
        return self.table.flatten().tolist()


vault = this_host().spawn_procs(per_host={"node": 1}).spawn("vault", Vault)
mirror = this_host().spawn_procs(per_host={"node": 1}).spawn("mirror", Mirror)

original = vault.contents.call_one().get()
copied = mirror.pull.call_one(vault).get()
print(f"first pull: {len(copied)} values, ends {copied[0]} .. {copied[-1]}")
assert copied == original and copied[0] == -1.0 and copied[-1] == 1.0

vault.rescale.call_one(3.0).get()
changed = vault.contents.call_one().get()
again = mirror.pull.call_one(vault).get()
print(f"after rescale: ends {again[0]} .. {again[-1]}")
assert again == changed and again[-1] == 3.0
print("getting started: RDMA weights OK")
