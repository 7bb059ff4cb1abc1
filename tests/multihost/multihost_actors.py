"""Actor classes for the multi-host tests (workers import them by module name)."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from actormesh import Actor, ActorMesh, current_rank, endpoint
from actormesh._hosts import Runtime


def _established_peers() -> set[str]:
    """IPv4 addresses of the peers of this network namespace's established TCP sockets."""
    peers = set()
    with open("/proc/self/net/tcp", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote, state = fields[2], fields[3]
            if state != "01":  # ESTABLISHED
                continue
            packed = bytes.fromhex(remote.split(":")[0])
            peers.add(socket.inet_ntoa(packed[::-1]))
    return peers


class Where(Actor):
    """Says where it runs and relays calls to other meshes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.memory: Any = None
        self.notes: dict[int, Any] = {}

    @endpoint
    def remember(self, value: Any) -> None:
        self.memory = value

    @endpoint
    def recall(self) -> Any:
        return self.memory

    @endpoint
    def note(self, key: int, value: Any) -> None:
        """Remember ``value`` under ``key`` (callers of their own keys never mix)."""
        self.notes[key] = value

    @endpoint
    def noted(self, key: int) -> Any:
        return self.notes.get(key)

    @endpoint
    def where(self) -> dict[str, Any]:
        runtime = Runtime.current()
        return {
            "pid": os.getpid(),
            "address": runtime.address if runtime else None,
            "rank": current_rank().rank,
            "env_rank": os.environ.get("ACTORMESH_RANK"),
            "env_coords": os.environ.get("ACTORMESH_COORDS"),
            "env_size": os.environ.get("ACTORMESH_WORLD_SIZE"),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    @endpoint
    def peers(self) -> set[str]:
        return _established_peers()

    @endpoint
    def rank_plus(self, offset: int) -> int:
        return current_rank().rank + offset

    @endpoint
    def call_other(self, other: ActorMesh[Where], coords: dict[str, int]) -> dict[str, Any]:
        """Call the actor of ``other`` at ``coords``, from here (actor to actor)."""
        value: dict[str, Any] = other.slice(**coords).where.call_one().get(timeout=20)
        return value

    @endpoint
    async def freeze_loop(self, seconds: float) -> None:
        """Block this process' event loop for ``seconds`` (call it with ``broadcast``)."""
        time.sleep(seconds)

    @endpoint
    def late_on(self, rank: int, seconds: float) -> int:
        """Answers with this rank at once, except on ``rank``, which waits ``seconds``."""
        if current_rank().rank == rank:
            self.release.wait(seconds)
        return int(current_rank().rank)

    @endpoint
    def block(self) -> str:
        """Holds the call until the process dies (the test kills it)."""
        self.release.wait(60)
        return "released"

    @endpoint
    def say(self, text: str) -> int:
        """Print ``text`` (its owner should see it, prefixed) and return this pid."""
        print(text, flush=True)
        return os.getpid()

    @endpoint
    def crash(self, code: int) -> None:
        """Exit this process at once, as a crash would."""
        os._exit(code)

    @endpoint
    def restarts(self) -> int:
        """How many processes held this rank before this one."""
        return int(os.environ.get("ACTORMESH_RESTARTS", "0"))


class RayUser(Actor):
    """Code that uses Ray from inside an actor placed by RayAllocator."""

    @endpoint
    def cluster(self) -> dict[str, Any]:
        import ray

        if not ray.is_initialized():
            ray.init(log_to_driver=False)  # RAY_ADDRESS, set by the allocator, says where
        context = ray.get_runtime_context()
        alive = [node for node in ray.nodes() if node.get("Alive")]
        return {"gcs": context.gcs_address, "nodes": len(alive)}


class TorchPeer(Actor):
    """A small model, for process groups and weight sync across hosts."""

    def __init__(self, seed: int, size: int = 256) -> None:
        import torch

        torch.manual_seed(seed)
        self.model = torch.nn.Linear(size, size)

    @endpoint
    def all_reduce(self, value: float) -> float:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value])
        dist.all_reduce(tensor)
        return float(tensor.item())

    @endpoint
    def weight_sum(self) -> float:
        return float(sum(float(p.sum()) for p in self.model.parameters()))

    @endpoint
    def bulk_sent(self) -> int:
        """Bytes this process sent as the source of bulk transfers."""
        runtime = Runtime.current()
        return runtime.bulk.sent_bytes if runtime is not None else 0


class BufferOwner(Actor):
    """Registers a tensor as an ``RDMABuffer`` and hands the buffer out."""

    def __init__(self, numel: int) -> None:
        import torch

        from actormesh.rdma import RDMABuffer

        self.weights = torch.arange(numel, dtype=torch.float32)
        self.buffer = RDMABuffer(self.weights.view(torch.uint8).flatten())

    @endpoint
    def handle(self) -> Any:
        return self.buffer

    @endpoint
    def weights_now(self) -> Any:
        return self.weights.clone()

    @endpoint
    async def read(self, buffer: Any, numel: int) -> Any:
        import torch

        local = torch.zeros(numel, dtype=torch.float32)
        await buffer.read_into(local.view(torch.uint8).flatten())
        return local

    @endpoint
    async def write(self, buffer: Any, value: float, numel: int) -> None:
        import torch

        await buffer.write_from(torch.full((numel,), value).view(torch.uint8).flatten())


class Keeper(Actor):
    """Keeps the array it is sent, and says what memory holds it (bulk data)."""

    def __init__(self) -> None:
        self.data: Any = None

    @endpoint
    def take(self, data: Any) -> int:
        self.data = data
        return len(data)

    @endpoint
    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(memoryview(self.data)).hexdigest()

    @endpoint
    def mapping(self) -> tuple[str, int]:
        """The file and inode of the mapping the kept array's memory is in."""
        address = self.data.__array_interface__["data"][0]
        with open("/proc/self/maps", encoding="ascii") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if start <= address < end:
                    return (fields[5].strip() if len(fields) > 5 else ""), int(fields[4])
        return "", 0

    @endpoint
    def parent(self) -> int:
        return os.getppid()
