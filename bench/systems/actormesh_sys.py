"""actormesh, through its public API only (the README's API tour).

``await proc_mesh(gpus=n)``, ``await procs.spawn(name, Cls)``, ``call_one`` on a
singleton slice, ``call`` returning a ``ValueMesh``, futures awaited or ``.get()``.
Beyond the shared echo actor (``_meshlike``) it measures what only actormesh has:
``choose`` policies (one endpoint per policy, declared with ``@endpoint(choose=...)``),
weight sync between actors, and ``actormesh.rpc`` next to torch's. Features the
library does not have yet are reported as "not available", never a crash.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from actormesh import Actor, endpoint, proc_mesh
from bench import services
from bench.catalog import CHOOSE_POLICIES
from bench.systems._meshlike import ActorMeshes, MeshLikeSystem, echo_class
from bench.systems._rpclike import RpcWorld, rpc_workloads
from bench.systems.base import Metrics, NotAvailable, WorkloadFn
from bench.workloads import (
    SKEW_BASE_MS,
    SKEW_FACTOR,
    Context,
    make_state_dict,
    skewed_throughput,
    state_dict_fingerprint,
    timed_syncs,
)

__all__ = ["SYSTEM", "ActormeshSystem", "Echo", "EchoBase"]

_RPC_NAMES = ("init_rpc", "rpc_async", "rpc_sync", "shutdown")

EchoBase = echo_class(Actor, endpoint, __name__, "EchoBase", rdma_module="actormesh.rdma")


def _extras() -> dict[str, Any]:
    """Endpoints beyond the echo: a ``work_<policy>`` per choose policy, weight sync."""

    def work_with(policy: str) -> Any:
        async def work(self: Any, ms: float) -> None:
            await asyncio.sleep(ms * self._slow / 1000)

        work.__name__ = work.__qualname__ = f"work_{policy}"
        return endpoint(choose=policy)(work)

    async def set_slow(self: Any, factor: int) -> None:
        self._slow = factor

    async def make_weights(self: Any, nbytes: int) -> list[tuple[str, int, int]]:
        self._sd = make_state_dict(nbytes)
        return state_dict_fingerprint(self._sd)

    async def get_weights(self: Any) -> dict[str, Any]:
        return self._sd  # type: ignore[no-any-return]

    async def pull_weights(self: Any, trainer: Any) -> list[tuple[str, int, int]]:
        self._sd = await trainer.get_weights.call_one()
        return state_dict_fingerprint(self._sd)

    async def weights_fingerprint(self: Any) -> list[tuple[str, int, int]]:
        return state_dict_fingerprint(self._sd)

    async def drop_weights(self: Any) -> None:
        self._sd = {}

    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": "Echo",
        "_slow": 1,
        "_sd": {},
    }
    fns = (set_slow, make_weights, get_weights, pull_weights, weights_fingerprint, drop_weights)
    for fn in fns:
        namespace[fn.__name__] = endpoint(fn)
    for policy in CHOOSE_POLICIES:
        namespace[f"work_{policy}"] = work_with(policy)
    return namespace


Echo = type("Echo", (EchoBase,), _extras())


class ActormeshSystem(MeshLikeSystem):
    """actormesh on this host (the local allocator)."""

    echo = Echo

    def __init__(self) -> None:
        self._rpc_world: RpcWorld | None = None

    def start_procs(self, n: int) -> Any:
        return proc_mesh(gpus=n).get()

    def spawn(self, procs: Any, name: str, cls: type) -> Any:
        return procs.spawn(name, cls)

    def stop_sync(self) -> None:
        if self._rpc_world is not None:
            self._rpc_world.shutdown()
            self._rpc_world = None

    def overrides(self) -> dict[str, WorkloadFn]:
        return {
            **rpc_workloads(self._rpc),
            "choose_skewed": _choose_skewed,
            "service_requests": services.actormesh_service,
            "weight_sync_100m": _weight_sync(100 * 10**6),
            "weight_sync_1g": _weight_sync(10**9),
        }

    def _rpc(self, ctx: Context) -> RpcWorld:
        if self._rpc_world is None:
            try:
                rpc = importlib.import_module("actormesh.rpc")
            except ImportError as e:
                raise NotAvailable(f"actormesh.rpc cannot be imported ({e})") from None
            missing = [n for n in _RPC_NAMES if not hasattr(rpc, n)]
            if missing:
                raise NotAvailable(f"actormesh.rpc has no {', '.join(missing)} yet")
            self._rpc_world = RpcWorld("actormesh.rpc", 1)
        return self._rpc_world


async def _choose_skewed(ctx: Context) -> Metrics:
    """``choose`` calls/s over 4 actors, the last 10x slower, for each policy."""
    mesh = await ctx.mesh()
    assert isinstance(mesh, ActorMeshes)
    (actors,) = mesh.meshes
    await mesh.call(mesh.size - 1, "set_slow", SKEW_FACTOR)
    out: Metrics = {}
    try:
        for policy in CHOOSE_POLICIES:
            before = _completed(actors)
            out[policy] = await skewed_throughput(_chooser(actors, policy), ctx.quick)
            after = _completed(actors)
            out[f"{policy}_calls_per_rank"] = [after[r] - before.get(r, 0) for r in sorted(after)]
    finally:
        await mesh.call(mesh.size - 1, "set_slow", 1)
    return out


def _chooser(actors: Any, policy: str) -> Any:
    ep = getattr(actors, f"work_{policy}")
    return lambda: ep.choose(SKEW_BASE_MS)


def _completed(actors: Any) -> dict[int, int]:
    """Calls completed per rank so far, as the mesh's ``stats()`` reports them."""
    return {rank: int(row.get("completed", 0)) for rank, row in actors.stats().items()}


def get_state(actor: Any) -> dict[str, Any]:
    """``sync_weights``'s ``get_state`` in the trainer: the synthetic state_dict."""
    return actor._sd  # type: ignore[no-any-return]


def set_state(actor: Any, state: dict[str, Any], version: int) -> None:
    """``sync_weights``'s ``set_state`` in a generator: keep what arrived."""
    actor._sd = state


def _weight_sync(nbytes: int) -> WorkloadFn:
    async def run(ctx: Context) -> Metrics:
        try:
            sync_weights = importlib.import_module("actormesh.torch").sync_weights
        except (ImportError, AttributeError) as e:
            raise NotAvailable(f"actormesh.torch.sync_weights is missing ({e})") from None
        mesh = await ctx.mesh()
        assert isinstance(mesh, ActorMeshes)
        (actors,) = mesh.meshes
        trainer, generators = actors.slice(gpus=slice(0, 1)), actors.slice(gpus=slice(1, 3))
        versions = iter(range(1, 1000))

        async def prepare(n: int) -> Any:
            return await mesh.call(0, "make_weights", n)

        async def sync_once(expected: Any) -> None:
            await sync_weights(
                trainer,
                generators,
                version=next(versions),
                get_state=get_state,
                set_state=set_state,
            )
            got = await generators.weights_fingerprint.call()
            if any(g != expected for g in got.values()):
                raise AssertionError("a generator's weights differ from the trainer's")

        async def pull_once(expected: Any) -> None:
            # The same move with plain endpoints: each generator calls the trainer.
            pulls = [mesh.send(g, "pull_weights", mesh.ref(0)) for g in (1, 2)]
            if any(got != expected for got in await mesh.wait_many(pulls)):
                raise AssertionError("a generator's weights differ from the trainer's")

        try:
            out = await timed_syncs(prepare, sync_once, nbytes, ctx.quick)
            pull = await timed_syncs(prepare, pull_once, nbytes, ctx.quick)
        finally:
            await mesh.call_all("drop_weights")
        return {
            **out,
            "method": "actormesh.torch.sync_weights, 1 trainer to 2 generators",
            "endpoint_pull_mbps": pull["mbps"],
        }

    run.__doc__ = f"Weight sync of {nbytes / 1e6:.0f} MB with actormesh.torch.sync_weights."
    return run


SYSTEM = ActormeshSystem
