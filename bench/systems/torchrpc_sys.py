"""torch.distributed.rpc (torch 2.13.0, CPU): TensorPipe over loopback.

One RPC world per benchmark worker (torch cannot initialise RPC twice in a process),
with as many worker processes as the largest mesh needs; an "actor" is an `RpcEcho`
owned by a worker and called through its RRef. Several actors may share a worker.
"""

from __future__ import annotations

from bench.catalog import FANOUT_SIZES
from bench.systems._rpclike import RpcMesh, RpcWorld, rpc_workloads
from bench.systems.base import Mesh, System, WorkloadFn
from bench.workloads import Context

__all__ = ["SYSTEM", "TorchRpcSystem"]

_MODULE = "torch.distributed.rpc"


class TorchRpcSystem(System):
    """torch.distributed.rpc with its default (TensorPipe) backend."""

    def __init__(self) -> None:
        self.world: RpcWorld | None = None

    def start_sync(self) -> None:
        from bench.workloads import fanout_procs

        self.world = RpcWorld(_MODULE, max(4, fanout_procs(max(FANOUT_SIZES), self)))

    def stop_sync(self) -> None:
        if self.world is not None:
            self.world.shutdown()
            self.world = None

    def open_sync(self, actors: int, procs: int) -> Mesh:
        assert self.world is not None, "start_sync first"
        return RpcMesh(self.world, actors, procs)

    def overrides(self) -> dict[str, WorkloadFn]:
        return rpc_workloads(self._started_world)

    def _started_world(self, ctx: Context) -> RpcWorld:
        ctx.start()
        assert self.world is not None
        return self.world


SYSTEM = TorchRpcSystem
