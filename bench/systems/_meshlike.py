"""What Monarch and actormesh share: the same actor vocabulary, so the same adapter.

Both spell an actor as a subclass of their ``Actor`` with ``@endpoint`` methods, both
spawn one actor per process of a process mesh (``procs.spawn(name, Cls)``), call one
actor of a singleton slice with ``call_one`` and all with ``call`` (a ``ValueMesh``),
and both return futures that asyncio code awaits and sync code ``.get()``s. Only how a
process mesh is started, and whether ``spawn`` returns a future, differ; subclasses
say that in two methods.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from bench import payload
from bench.systems.base import Mesh, System

__all__ = ["ActorMeshes", "MeshLikeSystem", "echo_class"]


def echo_class(
    actor_base: type,
    endpoint: Callable[..., Any],
    module: str,
    name: str = "Echo",
    rdma_module: str | None = None,
) -> type:
    """The echo actor for a system whose actors subclass ``actor_base``.

    Every endpoint is ``async def`` (Monarch 0.7 refuses actors that mix sync and async
    endpoints). The class is given ``module`` and ``name`` so it pickles by reference
    once the caller binds it to ``<module>.<name>``. With ``rdma_module`` (a module with
    Monarch's ``RDMABuffer``), ``lend()`` registers the held tensor and returns the buffer.
    """

    class Echo(actor_base):  # type: ignore[misc]
        def __init__(self) -> None:
            self._held: Any = None

        @endpoint
        async def ping(self, x: Any) -> Any:
            return x

        @endpoint
        async def pid(self) -> int:
            import os

            return os.getpid()

        @endpoint
        async def fingerprint(self, t: Any) -> tuple[int, int]:
            return payload.fingerprint(t)

        @endpoint
        async def checksum(self, t: Any) -> tuple[int, int]:
            return payload.checksum(t)

        @endpoint
        async def hold(self, nbytes: int) -> None:
            self._held = payload.make_tensor(nbytes) if nbytes else None

        @endpoint
        async def give(self) -> Any:
            return self._held

        @endpoint
        async def lend(self) -> Any:
            import importlib

            import torch

            if rdma_module is None:
                raise NotImplementedError("this system has no RDMABuffer")
            buffer_class = importlib.import_module(rdma_module).RDMABuffer
            return buffer_class(self._held.view(torch.uint8).flatten())

        @endpoint
        async def a2a(self, peer: Any, n: int) -> list[float]:
            samples = []
            for i in range(n):
                t0 = time.perf_counter()
                await peer.ping.call_one(i)
                samples.append(time.perf_counter() - t0)
            return samples

    Echo.__module__ = module
    Echo.__name__ = Echo.__qualname__ = name
    return Echo


class ActorMeshes(Mesh):
    """``k`` actor meshes over one process mesh of ``procs`` processes.

    Rank ``j * procs + i`` is the actor of mesh ``j`` in process ``i``; ``call_all``
    calls each mesh once (``k == 1`` except when ``fanout`` packs actors).
    """

    def __init__(self, procs: Any, meshes: list[Any], per_mesh: int) -> None:
        super().__init__(len(meshes) * per_mesh)
        self.procs = procs
        self.meshes = meshes
        self.singles = [m.slice(gpus=i) for m in meshes for i in range(per_mesh)]

    def send(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self.singles[rank], method).call_one(*args)

    async def wait(self, pending: Any) -> Any:
        return await pending

    def wait_sync(self, pending: Any) -> Any:
        return pending.get()

    async def call_all(self, method: str, *args: Any) -> list[Any]:
        pending = [getattr(m, method).call(*args) for m in self.meshes]
        out: list[Any] = []
        for p in pending:
            out.extend((await p).values())
        return out

    def call_all_sync(self, method: str, *args: Any) -> list[Any]:
        """`call_all` from sync code."""
        pending = [getattr(m, method).call(*args) for m in self.meshes]
        return [v for p in pending for v in p.get().values()]

    def ref(self, rank: int) -> Any:
        return self.singles[rank]

    def close_sync(self) -> None:
        self.procs.stop().get()


class MeshLikeSystem(System):
    """A system with Monarch's vocabulary; see the module docstring."""

    one_sided_reads: ClassVar[bool] = True
    """Whether its echo lends ``RDMABuffer``s (``rdma_read_64m``)."""

    echo: type
    """The system's echo actor class (from `echo_class`, possibly extended)."""

    @abstractmethod
    def start_procs(self, n: int) -> Any:
        """A ready process mesh of ``n`` processes with one dimension named ``gpus``."""

    @abstractmethod
    def spawn(self, procs: Any, name: str, cls: type) -> Any:
        """The actor mesh of ``cls`` spawned on ``procs``."""

    def open_sync(self, actors: int, procs: int) -> Mesh:
        pm = self.start_procs(procs)
        meshes = [self.spawn(pm, f"echo{j}", self.echo) for j in range(actors // procs)]
        mesh = ActorMeshes(pm, meshes, procs)
        mesh.call_all_sync("ping", None)
        return mesh
