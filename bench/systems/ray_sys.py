"""Ray actors (``ray==2.58.0``) on a local single-node cluster.

Actors are plain (sync) Ray actors, one per worker process as Ray places them, with
``num_cpus=0`` so that 32 of them fit on a 2-core machine. Calls are
``actor.method.remote(...)``; sync code waits with ``ray.get``, asyncio code awaits
the ``ObjectRef``. The ``choose`` baseline picks a random actor (Ray has no
load-aware choice); the weight-sync baseline goes through the object store.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import ray

from bench import payload, services
from bench.systems.base import Mesh, Metrics, System, WorkloadFn
from bench.workloads import (
    SKEW_BASE_MS,
    SKEW_FACTOR,
    Context,
    make_state_dict,
    skewed_throughput,
    state_dict_fingerprint,
    timed_syncs,
)

__all__ = ["SYSTEM", "Echo", "RaySystem"]


@ray.remote(num_cpus=0)
class Echo(payload.EchoMethods):
    """The echo actor (see ``bench.systems.base.ECHO_ENDPOINTS``), plus choose/sync helpers."""

    def __init__(self) -> None:
        super().__init__()
        self._slow = 1
        self._sd: dict[str, Any] = {}

    def a2a(self, peer: Any, n: int) -> list[float]:
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            ray.get(peer.ping.remote(i))
            samples.append(time.perf_counter() - t0)
        return samples

    def set_slow(self, factor: int) -> None:
        self._slow = factor

    def work(self, ms: float) -> None:
        time.sleep(ms * self._slow / 1000)

    def make_weights(self, nbytes: int) -> list[tuple[str, int, int]]:
        self._sd = make_state_dict(nbytes)
        return state_dict_fingerprint(self._sd)

    def publish(self) -> list[Any]:
        # Wrapped in a list so the caller receives the reference, not the values.
        return [ray.put(self._sd)]

    def load(self, sd: dict[str, Any]) -> list[tuple[str, int, int]]:
        self._sd = sd
        return state_dict_fingerprint(sd)


class RayMesh(Mesh):
    """Ray actor handles by rank."""

    def __init__(self, actors: list[Any]) -> None:
        super().__init__(len(actors))
        self.actors = actors

    def send(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self.actors[rank], method).remote(*args)

    async def wait(self, pending: Any) -> Any:
        return await pending

    def wait_sync(self, pending: Any) -> Any:
        return ray.get(pending)

    async def call_all(self, method: str, *args: Any) -> list[Any]:
        return list(await asyncio.gather(*(getattr(a, method).remote(*args) for a in self.actors)))

    def ref(self, rank: int) -> Any:
        return self.actors[rank]

    def close_sync(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


class RaySystem(System):
    """A local Ray cluster started by ``ray.init`` in the benchmark worker."""

    multi_actor_procs = False

    def start_sync(self) -> None:
        ray.init(
            address="local",  # its own instance, whatever `ray start` left on the machine
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )

    def stop_sync(self) -> None:
        ray.shutdown()

    def open_sync(self, actors: int, procs: int) -> Mesh:
        handles = [Echo.remote() for _ in range(actors)]  # type: ignore[attr-defined]
        ray.get([h.ping.remote(None) for h in handles])
        return RayMesh(handles)

    def overrides(self) -> dict[str, WorkloadFn]:
        return {
            "choose_skewed": _choose_random,
            "service_requests": services.ray_actor_pool,
            "weight_sync_100m": _weight_sync(100 * 10**6),
            "weight_sync_1g": _weight_sync(10**9),
        }


async def _choose_random(ctx: Context) -> Metrics:
    """Ray's baseline for ``choose``: a uniformly random actor per call."""
    mesh = await ctx.mesh()
    assert isinstance(mesh, RayMesh)
    await mesh.call(mesh.size - 1, "set_slow", SKEW_FACTOR)
    rng = random.Random(0)

    def submit() -> Any:
        return rng.choice(mesh.actors).work.remote(SKEW_BASE_MS)

    rate = await skewed_throughput(submit, ctx.quick)
    await mesh.call(mesh.size - 1, "set_slow", 1)
    return {"random": rate}


def _weight_sync(nbytes: int) -> WorkloadFn:
    async def run(ctx: Context) -> Metrics:
        mesh = await ctx.mesh()
        trainer, generators = 0, (1, 2)

        async def prepare(n: int) -> Any:
            return await mesh.call(trainer, "make_weights", n)

        async def sync_once(expected: Any) -> None:
            (ref,) = await mesh.call(trainer, "publish")
            got = await mesh.wait_many([mesh.send(g, "load", ref) for g in generators])
            if any(g != expected for g in got):
                raise AssertionError("a generator's weights differ from the trainer's")

        out = await timed_syncs(prepare, sync_once, nbytes, ctx.quick)
        await mesh.call_all("load", {})
        return {**out, "method": "ray.put in the trainer, ray.get in each generator"}

    run.__doc__ = f"Weight sync of {nbytes / 1e6:.0f} MB through Ray's object store."
    return run


SYSTEM = RaySystem
