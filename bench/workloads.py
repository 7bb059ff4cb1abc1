"""The generic workloads, written once against `bench.systems.base.Mesh`.

A workload is a function of a `Context` returning a flat dict of metrics (the keys
the catalog's rows name, plus details). Sync functions run with no event loop in the
thread; ``async`` ones run on the worker's one event loop. A system replaces any of
these with its own through `System.overrides`.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import procfs
from bench.catalog import FANOUT_SIZES, QUICK_FANOUT_SIZES, SWEEP_SIZES
from bench.payload import MIB, PAGE_ELEMENTS, checksum, fingerprint, make_tensor, size_label
from bench.stats import Budget, Summary, mbps, time_async, time_sync
from bench.systems.base import Mesh, Metrics, NotApplicable, NotAvailable, System, WorkloadFn

__all__ = [
    "GENERIC",
    "SKEW_BASE_MS",
    "SKEW_FACTOR",
    "Context",
    "fanout_procs",
    "make_state_dict",
    "resolve",
    "skewed_throughput",
    "state_dict_fingerprint",
    "state_dict_layout",
    "timed_syncs",
]


class Context:
    """What a workload sees: the system, the run's mode, and shared meshes.

    The 4-actor mesh is opened on first use and shared by the workloads of one worker
    (so the idle workloads, which run first, see it fresh).
    """

    def __init__(self, system: System, system_name: str, quick: bool) -> None:
        self.system = system
        self.system_name = system_name
        self.quick = quick
        self._started = False
        self._meshes: dict[tuple[str, int], Mesh] = {}

    def pick(self, full: Budget, quick: Budget) -> Budget:
        """The budget for this run's mode."""
        return quick if self.quick else full

    def start(self) -> None:
        """Run the system's session set-up once."""
        if not self._started:
            self._started = True
            self.system.start_sync()

    async def mesh(self, actors: int = 4) -> Mesh:
        """The shared mesh of ``actors`` actors, one per process (opened on first use)."""
        key = ("async", actors)
        if key not in self._meshes:
            # On the loop thread, blocking it: nothing else runs yet, and some systems
            # (Ray's signal handlers) want their set-up on the main thread.
            self.start()
            self._meshes[key] = await self.system.open(actors, actors)
        return self._meshes[key]

    def mesh_sync(self, actors: int = 4) -> Mesh:
        """`mesh` for sync workloads."""
        key = ("sync", actors)
        if key not in self._meshes:
            self.start()
            self._meshes[key] = self.system.open_sync(actors, actors)
        return self._meshes[key]

    def close(self) -> None:
        """Close every shared mesh, then the system's session."""
        meshes, self._meshes = list(self._meshes.values()), {}
        for mesh in meshes:
            mesh.close_sync()
        if self._started:
            self._started = False
            self.system.stop_sync()


def fanout_procs(actors: int, system: System) -> int:
    """Processes for ``actors`` actors: one each, unless that outnumbers the cores.

    Then (if the system allows several actors in a process) the largest power of two
    not above the core count, so that the actors divide evenly.
    """
    if not system.multi_actor_procs:
        return actors
    cores = os.cpu_count() or 1
    procs = 1
    while procs * 2 <= cores:
        procs *= 2
    return min(actors, procs)


def _check(got: Any, expected: tuple[int, int], what: str) -> None:
    if tuple(got) != expected:
        raise AssertionError(f"{what}: receiver computed {tuple(got)}, sender {expected}")


# -- start-up and idle ---------------------------------------------------------------


def spawn_4(ctx: Context) -> Metrics:
    """Time fresh interpreters from exec to a 4-actor mesh answering (``bench.probe``)."""
    runs = 1 if ctx.quick else 3
    samples = []
    for _ in range(runs):
        samples.append(_probe_once(ctx.system_name))
    return {"seconds": statistics.median(samples), "runs": samples}


def _probe_once(system_name: str, limit: float = 90.0) -> float:
    cmd = [sys.executable, "-m", "bench.probe", system_name]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    elapsed = None
    try:
        for line in proc.stdout:
            if line.startswith("READY"):
                elapsed = time.perf_counter() - t0
                break
        # Drain the rest so the probe never blocks on a full pipe while it shuts down.
        for _ in proc.stdout:
            pass
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        procfs.end_processes([*procfs.descendants(proc.pid), proc.pid])
        proc.wait()
    if elapsed is None:
        raise RuntimeError(f"spawn probe exited with {proc.returncode} before READY")
    # Whatever the probe left behind (it should be nothing) is ended before the next run.
    procfs.end_processes(procfs.children(os.getpid()))
    return elapsed


async def idle_rss_mb(ctx: Context) -> Metrics:
    """Median RSS of the workers of a fresh 4-actor mesh that has seen no tensor."""
    mesh = await ctx.mesh()
    pids = sorted(set(await mesh.call_all("pid")))
    rss = [procfs.rss_mb(p) for p in pids]
    return {
        "rss_mb": statistics.median(rss),
        "per_worker_mb": rss,
        "torch_loaded": any(procfs.has_torch(p) for p in pids),
    }


async def idle_cpu(ctx: Context) -> Metrics:
    """CPU cores used by this process and all its descendants while the mesh is idle."""
    mesh = await ctx.mesh()
    await mesh.call_all("ping", None)
    await asyncio.sleep(0.5)  # let start-up work (imports, connection set-up) finish
    pids = [os.getpid(), *procfs.descendants(os.getpid())]
    window = 1.0 if ctx.quick else 3.0
    c0, t0 = procfs.cpu_seconds(pids), time.monotonic()
    await asyncio.sleep(window)
    c1, t1 = procfs.cpu_seconds(pids), time.monotonic()
    return {"cores": (c1 - c0) / (t1 - t0), "processes": len(pids), "window_s": t1 - t0}


# -- calls ---------------------------------------------------------------------------

_RTT = Budget(max_n=5000, seconds=2.0, warmup=200)
_RTT_QUICK = Budget(max_n=1000, seconds=0.5, warmup=50)


async def rtt_async(ctx: Context) -> Metrics:
    """No-op round trips to rank 0, awaited one at a time."""
    mesh = await ctx.mesh()
    samples = await time_async(lambda: mesh.call(0, "ping", None), ctx.pick(_RTT, _RTT_QUICK))
    return {**Summary.of(samples).micros(), "n": len(samples)}


def rtt_sync(ctx: Context) -> Metrics:
    """No-op round trips to rank 0 from a thread that has no event loop."""
    mesh = ctx.mesh_sync()
    samples = time_sync(lambda: mesh.call_sync(0, "ping", None), ctx.pick(_RTT, _RTT_QUICK))
    return {**Summary.of(samples).micros(), "n": len(samples)}


async def pipelined(ctx: Context) -> Metrics:
    """Issue N no-op calls to rank 0 without waiting, then wait for all; calls/s."""
    mesh = await ctx.mesh()
    n, reps = (500, 3) if ctx.quick else (2000, 5)
    await mesh.wait_many([mesh.send(0, "ping", i) for i in range(min(n, 200))])
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        replies = await mesh.wait_many([mesh.send(0, "ping", i) for i in range(n)])
        rates.append(n / (time.perf_counter() - t0))
        if replies[-1] != n - 1:
            raise AssertionError(f"last reply {replies[-1]!r}, expected {n - 1}")
    return {"calls_per_s": statistics.median(rates), "n": n, "reps": reps}


async def gather_4(ctx: Context) -> Metrics:
    """Call all 4 actors and gather their replies."""
    mesh = await ctx.mesh()
    samples = await time_async(lambda: mesh.call_all("ping", None), ctx.pick(_RTT, _RTT_QUICK))
    return {**Summary.of(samples).micros(), "n": len(samples)}


async def a2a_rtt(ctx: Context) -> Metrics:
    """Actor 0 pings actor 1 (another process) n times, timing each call itself."""
    mesh = await ctx.mesh()
    n = 300 if ctx.quick else 2000
    await mesh.call(0, "a2a", mesh.ref(1), 50)  # warm-up: connections, caches
    samples = await mesh.call(0, "a2a", mesh.ref(1), n)
    return {**Summary.of(samples).micros(), "n": len(samples)}


# -- tensors -------------------------------------------------------------------------

_TENSOR = Budget(max_n=200, seconds=2.0, min_n=5, warmup=2)
_TENSOR_QUICK = Budget(max_n=50, seconds=0.5, min_n=3, warmup=1)


async def _tensor_arg(mesh: Mesh, nbytes: int, budget: Budget) -> float:
    """Median seconds of a call with an ``nbytes`` tensor argument (contents verified)."""
    t = make_tensor(nbytes)
    _check(await mesh.call(0, "checksum", t), checksum(t), "full checksum")
    expected = fingerprint(t)

    async def op() -> None:
        _check(await mesh.call(0, "fingerprint", t), expected, "fingerprint")

    return Summary.of(await time_async(op, budget)).median


def _tensor_arg_workload(nbytes: int) -> WorkloadFn:
    async def run(ctx: Context) -> Metrics:
        mesh = await ctx.mesh()
        median = await _tensor_arg(mesh, nbytes, ctx.pick(_TENSOR, _TENSOR_QUICK))
        return {"mbps": mbps(nbytes, median), "median_ms": median * 1e3, "verified": True}

    run.__doc__ = f"A {size_label(nbytes)} tensor argument, round trip; MB/s."
    return run


async def tensor_ret_64m(ctx: Context) -> Metrics:
    """A 64 MiB tensor returned by rank 0; the caller fingerprints it each time."""
    nbytes = 64 * MIB
    mesh = await ctx.mesh()
    await mesh.call(0, "hold", nbytes)
    reference = make_tensor(nbytes)
    _check(checksum(await mesh.call(0, "give")), checksum(reference), "full checksum")
    expected = fingerprint(reference)
    del reference

    async def op() -> None:
        _check(fingerprint(await mesh.call(0, "give")), expected, "fingerprint")

    median = Summary.of(await time_async(op, ctx.pick(_TENSOR, _TENSOR_QUICK))).median
    await mesh.call(0, "hold", 0)
    return {"mbps": mbps(nbytes, median), "median_ms": median * 1e3, "verified": True}


async def rdma_read_64m(ctx: Context) -> Metrics:
    """A 64 MiB tensor of rank 0 read one-sided by the caller (``RDMABuffer.read_into``)
    into a tensor of its own, which it fingerprints each time."""
    if not getattr(ctx.system, "one_sided_reads", False):
        raise NotApplicable("no one-sided reads of another process' memory")
    import torch

    nbytes = 64 * MIB
    mesh = await ctx.mesh()
    await mesh.call(0, "hold", nbytes)
    buffer = await mesh.call(0, "lend")
    local = torch.zeros(nbytes // 4, dtype=torch.float32)
    await buffer.read_into(local.view(torch.uint8).flatten())
    reference = make_tensor(nbytes)
    _check(checksum(local), checksum(reference), "full checksum")
    expected = fingerprint(reference)
    del reference

    async def op() -> None:
        local[::PAGE_ELEMENTS] = -1.0  # what fingerprint reads: a read must rewrite it
        await buffer.read_into(local.view(torch.uint8).flatten())
        _check(fingerprint(local), expected, "fingerprint")

    median = Summary.of(await time_async(op, ctx.pick(_TENSOR, _TENSOR_QUICK))).median
    await mesh.call(0, "hold", 0)
    return {"mbps": mbps(nbytes, median), "median_ms": median * 1e3, "verified": True}


_SWEEP = Budget(max_n=100, seconds=0.6, min_n=3, warmup=1)
_SWEEP_QUICK = Budget(max_n=30, seconds=0.2, min_n=2, warmup=1)


async def payload_sweep(ctx: Context) -> Metrics:
    """Tensor-argument round trips from 1 KiB to 256 MiB: latency (µs) and MB/s."""
    mesh = await ctx.mesh()
    out: Metrics = {"sizes": list(SWEEP_SIZES)}
    for nbytes in SWEEP_SIZES:
        median = await _tensor_arg(mesh, nbytes, ctx.pick(_SWEEP, _SWEEP_QUICK))
        label = size_label(nbytes)
        out[f"{label}_us"] = median * 1e6
        out[f"{label}_mbps"] = mbps(nbytes, median)
    return out


# -- scale ---------------------------------------------------------------------------

_FANOUT = Budget(max_n=1000, seconds=1.0, warmup=20)
_FANOUT_QUICK = Budget(max_n=300, seconds=0.3, warmup=10)


async def fanout(ctx: Context) -> Metrics:
    """Call + gather latency on meshes of 1..32 actors, each opened for the purpose."""
    ctx.start()
    out: Metrics = {}
    for n in QUICK_FANOUT_SIZES if ctx.quick else FANOUT_SIZES:
        procs = fanout_procs(n, ctx.system)
        mesh = await ctx.system.open(n, procs)
        try:
            summary = await _gather_latency(mesh, n, ctx.pick(_FANOUT, _FANOUT_QUICK))
        finally:
            await mesh.close()
        out[f"n{n}_us"] = summary.median * 1e6
        out[f"n{n}_p99_us"] = summary.p99 * 1e6
        out[f"n{n}_procs"] = procs
    return out


async def _gather_latency(mesh: Mesh, n: int, budget: Budget) -> Summary:
    replies = await mesh.call_all("ping", n)
    if replies != [n] * n:
        raise AssertionError(f"replies {replies!r} from {n} actors")
    return Summary.of(await time_async(lambda: mesh.call_all("ping", None), budget))


GENERIC: dict[str, WorkloadFn] = {
    "a2a_rtt": a2a_rtt,
    "fanout": fanout,
    "gather_4": gather_4,
    "idle_cpu": idle_cpu,
    "idle_rss_mb": idle_rss_mb,
    "payload_sweep": payload_sweep,
    "rdma_read_64m": rdma_read_64m,
    "pipelined": pipelined,
    "rtt_async": rtt_async,
    "rtt_sync": rtt_sync,
    "spawn_4": spawn_4,
    "tensor_arg_1m": _tensor_arg_workload(MIB),
    "tensor_arg_64m": _tensor_arg_workload(64 * MIB),
    "tensor_ret_64m": tensor_ret_64m,
}


def resolve(system: System, name: str) -> WorkloadFn:
    """The function that runs workload ``name`` for ``system``.

    Raises:
        NotAvailable: the system declares it unsupported.
        NotApplicable: the workload is not meant for this system.
    """
    if name in system.unsupported:
        raise NotAvailable(system.unsupported[name])
    fn = system.overrides().get(name) or GENERIC.get(name)
    if fn is None:
        raise NotApplicable(f"{name} is not measured for this system")
    return fn


# -- helpers for the system-specific workloads -----------------------------------------

SKEW_BASE_MS = 2.0
SKEW_FACTOR = 10
SKEW_IN_FLIGHT = 32


async def skewed_throughput(
    submit: Callable[[], Awaitable[object]], quick: bool, in_flight: int = SKEW_IN_FLIGHT
) -> float:
    """Calls/s of ``n`` calls made by ``submit()``, at most ``in_flight`` outstanding."""
    n = 150 if quick else 600
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            await submit()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0)


def state_dict_layout(nbytes: int) -> list[tuple[str, int]]:
    """``(name, bytes)`` of the tensors of a synthetic state_dict of about ``nbytes``.

    4 MiB tensors up to 256 MB, 16 MiB above: the sizes of the layers of a model of
    that size, roughly.
    """
    chunk = 4 * MIB if nbytes <= 256 * MIB else 16 * MIB
    return [(f"layer{i}.weight", chunk) for i in range(max(1, round(nbytes / chunk)))]


def make_state_dict(nbytes: int) -> dict[str, Any]:
    """A state_dict laid out by `state_dict_layout`, tensors from `make_tensor`."""
    return {name: make_tensor(size) for name, size in state_dict_layout(nbytes)}


def state_dict_fingerprint(sd: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Per tensor ``(name, numel, crc of one element per page)``: checks every tensor."""
    return [(name, *fingerprint(t)) for name, t in sorted(sd.items())]


async def timed_syncs(
    prepare: Callable[[int], Awaitable[Any]],
    sync_once: Callable[[Any], Awaitable[object]],
    nbytes: int,
    quick: bool,
) -> Metrics:
    """MB/s of weight syncs of ``nbytes``: the median, and the first sync's.

    ``prepare(n)`` makes the trainer's state_dict of ``n`` bytes and returns what the
    generators must then hold (their fingerprints); ``sync_once(expected)`` moves it and
    checks every generator. A 1 MB sync first warms up connections and imports.
    """
    await sync_once(await prepare(10**6))
    expected = await prepare(nbytes)
    reps = 1 if quick else 3 if nbytes > 256 * MIB else 5
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await sync_once(expected)
        samples.append(time.perf_counter() - t0)
    median = statistics.median(samples)
    return {
        "mbps": mbps(nbytes, median),
        "first_mbps": mbps(nbytes, samples[0]),
        "median_s": median,
        "samples_s": samples,
        "reps": reps,
        "verified": True,
    }
