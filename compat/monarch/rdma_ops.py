"""``monarch.rdma`` 0.7: ``RDMABuffer`` reads, writes and drop, between processes.

An owner actor registers a tensor's bytes as an ``RDMABuffer`` and returns it from an
endpoint; the client and an actor in another process then

- ``read_into`` their own tensor (a ``Future``: ``.get()`` in sync code, ``await`` in
  async code) and see the owner's current bytes;
- ``write_from`` their tensor into the owner's memory, which the owner then sees;
- ask its ``size()``;
- ``drop()`` it.

Every check runs; the failures are listed at the end.
"""

from __future__ import annotations

import asyncio
import traceback

import torch
from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import RDMABuffer, get_rdma_backend

failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok    {name}")
    except Exception:
        failures.append(name)
        print(f"FAIL  {name}\n{traceback.format_exc()}")


N = 4096


class Owner(Actor):
    def __init__(self):
        self.data = torch.arange(N, dtype=torch.float32)
        self.buffer = RDMABuffer(self.data.view(torch.uint8).flatten())

    @endpoint
    def handle(self):
        return self.buffer

    @endpoint
    def total(self):
        return float(self.data.sum())

    @endpoint
    def scale(self, k):
        self.data.mul_(k)


class Peer(Actor):
    @endpoint
    async def pull(self, buffer):
        local = torch.zeros(N, dtype=torch.float32)
        await buffer.read_into(local.view(torch.uint8).flatten())
        return float(local.sum())

    @endpoint
    async def push(self, buffer, value):
        await buffer.write_from(torch.full((N,), value).view(torch.uint8).flatten())


owner = this_host().spawn_procs(per_host={"gpus": 1}).spawn("owner", Owner)
peer = this_host().spawn_procs(per_host={"gpus": 1}).spawn("peer", Peer)
buffer = owner.handle.call_one().get()


def backend_and_size():
    assert get_rdma_backend() in ("tcp", "ibverbs"), get_rdma_backend()
    assert isinstance(buffer, RDMABuffer)
    assert buffer.size() == N * 4


def client_reads():
    local = torch.zeros(N, dtype=torch.float32)
    buffer.read_into(local.view(torch.uint8).flatten()).get(timeout=30)
    assert torch.equal(local, torch.arange(N, dtype=torch.float32))


def actor_reads_the_current_bytes():
    assert peer.pull.call_one(buffer).get(timeout=30) == owner.total.call_one().get()
    owner.scale.call_one(2.0).get()
    assert peer.pull.call_one(buffer).get(timeout=30) == owner.total.call_one().get()


def actor_writes():
    peer.push.call_one(buffer, 1.5).get(timeout=30)
    assert owner.total.call_one().get() == 1.5 * N


def client_writes_then_reads_back():
    src = torch.full((N,), 3.0)
    buffer.write_from(src.view(torch.uint8).flatten()).get(timeout=30)
    assert owner.total.call_one().get() == 3.0 * N
    back = torch.zeros(N)

    async def read():
        await buffer.read_into(back.view(torch.uint8).flatten())

    asyncio.run(read())
    assert torch.equal(back, src)


def drop():
    mine = owner.handle.call_one().get()
    mine.drop().get(timeout=30)


for name, fn in list(globals().items()):
    is_check = callable(fn) and getattr(fn, "__module__", None) == __name__
    if is_check and name[0].islower() and name != "check":
        check(name, fn)

print(f"{len(failures)} check(s) failed: {failures}" if failures else "all RDMA checks OK")
raise SystemExit(1 if failures else 0)
