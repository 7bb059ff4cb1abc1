"""What torch.distributed.rpc and actormesh.rpc share: the same API, so the same adapter.

`RpcWorld` starts an RPC world on this host (this process is ``controller``, rank 0;
``workerN`` are fresh interpreters running this module) through the ``env://``
rendezvous (``MASTER_ADDR``/``MASTER_PORT``), for either module. Actors are
instances of `RpcEcho` owned by workers and called through RRef proxies
(``rref.rpc_async().ping(x)``), the torch RPC way of holding remote state. The RPC
workloads (``rpc_*``) call module-level functions with ``rpc_sync``/``rpc_async``.

Run as ``python -m bench.systems._rpclike MODULE RANK WORLD_SIZE`` it is a worker.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import subprocess
import sys
import time
from types import ModuleType
from typing import Any

from bench import payload, procfs
from bench.payload import MIB
from bench.stats import Budget, Summary, mbps, time_sync
from bench.systems.base import Mesh, Metrics, WorkloadFn

__all__ = ["RpcEcho", "RpcMesh", "RpcWorld", "rpc_workloads"]


# -- what runs in the workers ---------------------------------------------------------


def ping(x: Any) -> Any:
    """The no-op remote function."""
    return x


def fingerprint(t: Any) -> tuple[int, int]:
    """`bench.payload.fingerprint` as a remote function."""
    return payload.fingerprint(t)


def checksum(t: Any) -> tuple[int, int]:
    """`bench.payload.checksum` as a remote function."""
    return payload.checksum(t)


class RpcEcho(payload.EchoMethods):
    """The echo actor (``bench.systems.base.ECHO_ENDPOINTS``) as an RRef-owned object."""

    def a2a(self, peer: Any, n: int) -> list[float]:
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            peer.rpc_sync().ping(i)
            samples.append(time.perf_counter() - t0)
        return samples


# -- the controller's side ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RpcWorld:
    """An RPC world of this process (rank 0) and ``workers`` worker processes.

    torch's RPC cannot be initialised twice in one process, so a benchmark worker
    starts one world, sized for the largest mesh it will open, and keeps it.
    """

    def __init__(self, module_name: str, workers: int) -> None:
        self.module_name = module_name
        self.workers = workers
        self.rpc: ModuleType = importlib.import_module(module_name)
        port = _free_port()
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        world = workers + 1
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", __name__, module_name, str(rank), str(world)], env=env
            )
            for rank in range(1, world)
        ]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        self.rpc.init_rpc("controller", rank=0, world_size=world)

    @staticmethod
    def worker_name(index: int) -> str:
        """Name of worker ``index`` (0-based; its RPC rank is ``index + 1``)."""
        return f"worker{index + 1}"

    def shutdown(self) -> None:
        """Shut the world down (graceful: waits for every worker), then reap them."""
        self.rpc.shutdown()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                procfs.end_processes([proc.pid])


async def _bridge(fut: Any) -> Any:
    """Await a ``torch.futures.Future`` from asyncio (its callback runs on an RPC thread)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(f: Any) -> None:
        try:
            value = f.wait()
        except BaseException as e:
            loop.call_soon_threadsafe(_settle, done, None, e)
        else:
            loop.call_soon_threadsafe(_settle, done, value, None)

    fut.add_done_callback(settle)
    return await done


def _settle(done: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(value)
    else:
        done.set_exception(error)


class RpcMesh(Mesh):
    """RRefs to `RpcEcho` objects, spread round-robin over the first ``procs`` workers."""

    def __init__(self, world: RpcWorld, actors: int, procs: int) -> None:
        super().__init__(actors)
        self.world = world
        rpc = world.rpc
        self.rrefs = [rpc.remote(RpcWorld.worker_name(r % procs), RpcEcho) for r in range(actors)]
        self._collect = importlib.import_module("torch.futures").collect_all
        for rref in self.rrefs:
            rref.rpc_sync().ping(None)

    def send(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self.rrefs[rank].rpc_async(), method)(*args)

    async def wait(self, pending: Any) -> Any:
        return await _bridge(pending)

    def wait_sync(self, pending: Any) -> Any:
        return pending.wait()

    async def wait_many(self, pending: Any) -> list[Any]:
        # One hop into the event loop for the lot, as a torch user would write it.
        return [f.wait() for f in await _bridge(self._collect(list(pending)))]

    async def call_all(self, method: str, *args: Any) -> list[Any]:
        return await self.wait_many([self.send(r, method, *args) for r in range(self.size)])

    def ref(self, rank: int) -> Any:
        return self.rrefs[rank]

    def close_sync(self) -> None:
        self.rrefs = []


# -- the rpc_* workloads --------------------------------------------------------------

_RTT = Budget(max_n=5000, seconds=2.0, warmup=200)
_RTT_QUICK = Budget(max_n=1000, seconds=0.5, warmup=50)
_TENSOR = Budget(max_n=100, seconds=2.0, min_n=5, warmup=2)
_TENSOR_QUICK = Budget(max_n=30, seconds=0.5, min_n=3, warmup=1)


def rpc_workloads(world_of: Any) -> dict[str, WorkloadFn]:
    """The ``rpc_*`` workloads over the world ``world_of(ctx)`` (started on demand)."""

    def rpc_sync_rtt(ctx: Any) -> Metrics:
        world = world_of(ctx)
        to = RpcWorld.worker_name(0)
        budget = ctx.pick(_RTT, _RTT_QUICK)
        samples = time_sync(lambda: world.rpc.rpc_sync(to, ping, args=(None,)), budget)
        return {**Summary.of(samples).micros(), "n": len(samples)}

    def rpc_async_throughput(ctx: Any) -> Metrics:
        world = world_of(ctx)
        wait_all = importlib.import_module("torch.futures").wait_all
        to = RpcWorld.worker_name(0)
        n, reps = (500, 3) if ctx.quick else (2000, 5)
        wait_all([world.rpc.rpc_async(to, ping, args=(i,)) for i in range(200)])
        rates = []
        for _ in range(reps):
            t0 = time.perf_counter()
            replies = wait_all([world.rpc.rpc_async(to, ping, args=(i,)) for i in range(n)])
            rates.append(n / (time.perf_counter() - t0))
            if replies[-1] != n - 1:
                raise AssertionError(f"last reply {replies[-1]!r}, expected {n - 1}")
        return {"calls_per_s": sorted(rates)[len(rates) // 2], "n": n, "reps": reps}

    def rpc_tensor_64m(ctx: Any) -> Metrics:
        world = world_of(ctx)
        to = RpcWorld.worker_name(0)
        nbytes = 64 * MIB
        t = payload.make_tensor(nbytes)
        if tuple(world.rpc.rpc_sync(to, checksum, args=(t,))) != payload.checksum(t):
            raise AssertionError("the callee's checksum differs")
        expected = payload.fingerprint(t)

        def op() -> None:
            if tuple(world.rpc.rpc_sync(to, fingerprint, args=(t,))) != expected:
                raise AssertionError("the callee's fingerprint differs")

        median = Summary.of(time_sync(op, ctx.pick(_TENSOR, _TENSOR_QUICK))).median
        return {"mbps": mbps(nbytes, median), "median_ms": median * 1e3, "verified": True}

    return {
        "rpc_async_throughput": rpc_async_throughput,
        "rpc_sync_rtt": rpc_sync_rtt,
        "rpc_tensor_64m": rpc_tensor_64m,
    }


def _worker_main(argv: list[str]) -> int:
    module_name, rank, world = argv[0], int(argv[1]), int(argv[2])
    rpc = importlib.import_module(module_name)
    rpc.init_rpc(RpcWorld.worker_name(rank - 1), rank=rank, world_size=world)
    rpc.shutdown()  # blocks until the controller shuts the world down
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
