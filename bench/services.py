"""The ``service_requests`` workload: requests through a replicated service, with and
without a replica killed midway, on actormesh's ``spawn_service`` and on Ray's
``ActorPool``.

Both run the same closed loop: ``IN_FLIGHT`` requests outstanding at all times over
``REPLICAS`` replicas of one process each, every request ``WORK_MS`` of work that answers
its own number; a request's latency runs from its submission to its answer, queueing
included. In the failure run, once a third of the requests are answered, the process of
replica 1 gets SIGKILL. Each system recovers its own idiomatic way:

- actormesh: the service rebuilds the replica; the request in flight on it is sent again
  elsewhere (the endpoint is ``idempotent``), the queued ones move;
- Ray: the actors are made with ``max_restarts`` and ``max_task_retries``, so Ray
  restarts the actor and retries its task; the ActorPool loop is Ray's documented one
  (``submit`` / ``get_next_unordered``).

Every run checks that each request was answered exactly once (``lost`` and ``duplicated``
are recorded, and must be 0).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from actormesh import Actor, endpoint, spawn_service
from bench.stats import Summary
from bench.systems.base import Metrics
from bench.workloads import Context

__all__ = ["ServiceWorker", "actormesh_service", "ray_actor_pool"]

REPLICAS = 3
IN_FLIGHT = 6
WORK_MS = 2.0


class ServiceWorker(Actor):
    """One replica's process: a request is ``WORK_MS`` of (sleeping) work."""

    @endpoint(idempotent=True)
    async def work(self, request: int, ms: float) -> int:
        await asyncio.sleep(ms / 1000)
        return request


def _requests(ctx: Context) -> int:
    return 300 if ctx.quick else 1500


def _metrics(samples: list[tuple[float, int]], elapsed: float, n: int) -> Metrics:
    """Throughput, latency order statistics and the exactly-once check of one run."""
    counts = Counter(request for _, request in samples)
    summary = Summary.of([latency for latency, _ in samples])
    return {
        "rps": len(samples) / elapsed,
        "median_us": summary.median * 1e6,
        "p99_us": summary.p99 * 1e6,
        "max_us": summary.max * 1e6,
        "lost": sum(1 for r in range(n) if r not in counts),
        "duplicated": sum(c - 1 for c in counts.values() if c > 1),
    }


def _merge(plain: Metrics, failed: Metrics, extra: Metrics) -> Metrics:
    out = dict(plain)
    out.update({f"{key}_failure": value for key, value in failed.items() if key != "p99_us"})
    out["p99_failure_us"] = failed["p99_us"]
    out.update(extra)
    if any(m["lost"] or m["duplicated"] for m in (plain, failed)):
        raise AssertionError(f"requests lost or duplicated: {plain}, {failed}")
    return out


async def _closed_loop(
    submit: Callable[[int], Awaitable[Any]], n: int, kill: Callable[[], None] | None
) -> tuple[list[tuple[float, int]], float]:
    """``n`` requests, ``IN_FLIGHT`` outstanding; ``kill()`` once a third are answered."""
    samples: list[tuple[float, int]] = []
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(request: int) -> None:
        async with gate:
            t0 = time.perf_counter()
            answer = await submit(request)
            samples.append((time.perf_counter() - t0, answer))
            if kill is not None and len(samples) == n // 3:
                kill()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(r) for r in range(n)))
    return samples, time.perf_counter() - t0


async def actormesh_service(ctx: Context) -> Metrics:
    """The loop through ``spawn_service`` (least-loaded routing, one call per replica at
    a time, the rest queued in the service)."""
    n = _requests(ctx)
    runs: list[Metrics] = []
    recovered: float | None = None
    for failure in (False, True):
        service = await spawn_service(
            "bench-service", ServiceWorker, replicas=REPLICAS, per_replica=1, max_in_flight=1
        )
        try:
            # Every replica warm before the clock starts (round the three of them).
            await asyncio.gather(*(service.work.route(-1, 0.0) for _ in range(REPLICAS)))
            killed_at: list[float] = []

            def kill(svc: Any = service, at: list[float] = killed_at) -> None:
                at.append(time.perf_counter())
                os.kill(svc.stats()[1].pids[0], signal.SIGKILL)

            def submit(request: int, svc: Any = service) -> Awaitable[int]:
                return svc.work.route(request, WORK_MS)  # type: ignore[no-any-return]

            samples, elapsed = await _closed_loop(submit, n, kill if failure else None)
            runs.append(_metrics(samples, elapsed, n))
            if failure:
                await service.wait_serving()
                recovered = time.perf_counter() - killed_at[0]
                runs[-1]["restarts"] = sum(s.restarts for s in service.stats())
        finally:
            await service.stop()
    return _merge(runs[0], runs[1], {"requests": n, "rebuilt_within_s": recovered})


async def ray_actor_pool(ctx: Context) -> Metrics:
    """The same loop on ``ray.util.ActorPool`` (run on a thread: its API blocks)."""
    return await asyncio.to_thread(_ray_runs, _requests(ctx))


def _pool_work(actor: Any, request: int) -> Any:
    """ActorPool's ``fn(actor, value)``: the request on the actor the pool picked."""
    return actor.work.remote(request, WORK_MS)


def _ray_runs(n: int) -> Metrics:
    import ray
    from ray.util.actor_pool import ActorPool

    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
    class PoolWorker:
        def work(self, request: int, ms: float) -> int:
            time.sleep(ms / 1000)
            return request

        def pid(self) -> int:
            return os.getpid()

    runs: list[Metrics] = []
    for failure in (False, True):
        actors = [PoolWorker.remote() for _ in range(REPLICAS)]  # type: ignore[attr-defined]
        try:
            # Every actor up and warm before the clock starts.
            victim = ray.get([a.pid.remote() for a in actors])[1]
            ray.get([a.work.remote(-1, 0.0) for a in actors])
            pool = ActorPool(actors)
            started: dict[int, float] = {}
            samples: list[tuple[float, int]] = []

            def submit(request: int, pool: Any = pool, started: dict[int, float] = started) -> None:
                started[request] = time.perf_counter()
                pool.submit(_pool_work, request)

            t0 = time.perf_counter()
            sent = 0
            while sent < min(IN_FLIGHT, n):
                submit(sent)
                sent += 1
            while len(samples) < n:
                request = pool.get_next_unordered()
                samples.append((time.perf_counter() - started[request], request))
                if failure and len(samples) == n // 3:
                    os.kill(victim, signal.SIGKILL)
                if sent < n:
                    submit(sent)
                    sent += 1
            runs.append(_metrics(samples, time.perf_counter() - t0, n))
        finally:
            for actor in actors:
                ray.kill(actor)
    return _merge(runs[0], runs[1], {"requests": n, "rebuilt_within_s": None})
