"""What the suite measures: every workload's name, meaning, table rows and time limit.

This module is pure data. The runner reads it to schedule and watch workloads, the
report and the charts read it to lay results out, and each system decides *how* to
run a workload (see ``bench.workloads`` and ``bench.systems``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.payload import KIB, MIB, size_label

__all__ = [
    "CHOOSE_POLICIES",
    "FANOUT_SIZES",
    "GROUPS",
    "SWEEP_SIZES",
    "WORKLOADS",
    "Row",
    "Workload",
    "by_name",
]

FANOUT_SIZES = (1, 2, 4, 8, 16, 32)
QUICK_FANOUT_SIZES = (1, 2, 4, 8)
SWEEP_SIZES = tuple(KIB * 4**i for i in range(10))  # 1 KiB .. 256 MiB in powers of 4
CHOOSE_POLICIES = ("power_of_two", "least_loaded", "work_queue", "round_robin", "random")

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class Row:
    """One line of the results table: a metric of a workload."""

    key: str
    label: str
    unit: str
    better: Better


@dataclass(frozen=True)
class Workload:
    """A named measurement; ``name`` is its key in the JSON results.

    ``group`` says which worker process runs it: workloads of one group share a
    process (and its mesh); each group of each system gets a fresh one, so that a
    workload that needs a pristine process (a sync-only program, an RPC world) has it.
    ``limit_s`` is the watchdog: past it the worker is killed and the workload marked
    as timed out (``quick_limit_s`` under ``--quick``).
    """

    name: str
    description: str
    rows: tuple[Row, ...]
    group: str = "main"
    limit_s: float = 60.0
    quick_limit_s: float = 30.0


def _latency(extra: str = "") -> tuple[Row, ...]:
    return (
        Row("median_us", f"median{extra}", "µs", "lower"),
        Row("p99_us", f"p99{extra}", "µs", "lower"),
    )


def _mbps() -> tuple[Row, ...]:
    return (Row("mbps", "bandwidth", "MB/s", "higher"),)


def _sync_mbps() -> tuple[Row, ...]:
    # A training loop syncs every step: the median is the steady state, the first sync
    # (fresh memory everywhere) is shown beside it.
    return (
        Row("mbps", "median sync", "MB/s", "higher"),
        Row("first_mbps", "first sync", "MB/s", "higher"),
    )


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "spawn_4",
        "Fresh interpreter to a 4-actor mesh answering: a subprocess imports the system, "
        "creates 4 actors (one per process) and gets one reply from each.",
        (Row("seconds", "median", "s", "lower"),),
        limit_s=120,
        quick_limit_s=60,
    ),
    Workload(
        "idle_rss_mb",
        "Resident memory of one idle worker process of a fresh mesh that has not seen a "
        "tensor (median over the 4 workers); `torch_loaded` says if it imported torch anyway.",
        (Row("rss_mb", "median", "MiB", "lower"),),
    ),
    Workload(
        "idle_cpu",
        "CPU cores used by every process of a live, idle 4-actor mesh (controller, workers "
        "and daemons) over 3 s, from /proc/<pid>/stat.",
        (Row("cores", "mean", "cores", "lower"),),
    ),
    Workload(
        "rtt_async",
        "No-op call round trip to one actor from asyncio code, after warm-up.",
        _latency(),
    ),
    Workload(
        "rtt_sync",
        "No-op call round trip to one actor from plain sync code (no event loop), in a "
        "process that never started one.",
        _latency(),
        group="sync",
    ),
    Workload(
        "pipelined",
        "Pipelined no-op calls to one actor: issue N calls, then wait for all.",
        (Row("calls_per_s", "throughput", "calls/s", "higher"),),
    ),
    Workload(
        "gather_4",
        "Call an endpoint on 4 actors (4 processes) and gather the 4 replies.",
        _latency(),
    ),
    Workload(
        "a2a_rtt",
        "Actor-to-actor round trip: actor A calls actor B in another process, timed in A.",
        _latency(),
    ),
    Workload(
        "tensor_arg_1m",
        "1 MiB float32 tensor as a call argument; the actor fingerprints it (touches "
        "every page) and replies; contents checked by a full checksum first.",
        _mbps(),
    ),
    Workload(
        "tensor_arg_64m",
        "64 MiB tensor as a call argument, as tensor_arg_1m.",
        _mbps(),
    ),
    Workload(
        "tensor_ret_64m",
        "64 MiB tensor returned by an actor; the caller fingerprints it.",
        _mbps(),
    ),
    Workload(
        "rdma_read_64m",
        "64 MiB tensor of an actor read one-sided with Monarch's RDMABuffer.read_into "
        "(the owner does nothing); the caller overwrites the elements its fingerprint "
        "reads before each read, and fingerprints after it.",
        _mbps(),
    ),
    Workload(
        "payload_sweep",
        "Tensor-argument round trip for 1 KiB .. 256 MiB in powers of 4: latency and MB/s.",
        (
            Row(f"{size_label(KIB)}_us", "1 KiB latency", "µs", "lower"),
            Row(f"{size_label(64 * KIB)}_us", "64 KiB latency", "µs", "lower"),
            Row(f"{size_label(MIB)}_mbps", "1 MiB", "MB/s", "higher"),
            Row(f"{size_label(16 * MIB)}_mbps", "16 MiB", "MB/s", "higher"),
            Row(f"{size_label(256 * MIB)}_mbps", "256 MiB", "MB/s", "higher"),
        ),
        limit_s=240,
        quick_limit_s=120,
    ),
    Workload(
        "fanout",
        "Call + gather median latency as the mesh grows from 1 to 32 actors; where the "
        "processes would outnumber the cores, several actors share a process if the "
        "system allows it.",
        tuple(Row(f"n{n}_us", f"{n} actors", "µs", "lower") for n in FANOUT_SIZES),
        limit_s=300,
        quick_limit_s=150,
    ),
    Workload(
        "choose_skewed",
        "choose() throughput over 4 actors with 32 calls in flight, each call sleeping "
        "2 ms, except on one rank that is 10x slower; per choose policy.",
        tuple(Row(p, p, "calls/s", "higher") for p in CHOOSE_POLICIES),
        limit_s=120,
        quick_limit_s=60,
    ),
    Workload(
        "weight_sync_100m",
        "Move a 100 MB state_dict from a trainer actor to 2 generator actors; each "
        "verifies a fingerprint of every tensor. Model MB/s: the median of 5 syncs after a "
        "1 MB warm-up, and the first of them.",
        _sync_mbps(),
        limit_s=120,
        quick_limit_s=60,
    ),
    Workload(
        "weight_sync_1g",
        "As weight_sync_100m with a 1 GB state_dict (3 syncs).",
        _sync_mbps(),
        limit_s=240,
        quick_limit_s=120,
    ),
    Workload(
        "service_requests",
        "Requests through a service of 3 replicas (one process each), 6 outstanding, each "
        "2 ms of work: calls/s and p99 (queueing included), then again with one replica's "
        "process SIGKILLed a third of the way through (actormesh's spawn_service rebuilds "
        "it and resends the idempotent call; Ray's ActorPool over actors with "
        "max_restarts and max_task_retries). Every request is checked answered once.",
        (
            Row("rps", "throughput", "calls/s", "higher"),
            Row("p99_us", "p99", "µs", "lower"),
            Row("rps_failure", "throughput, replica killed", "calls/s", "higher"),
            Row("p99_failure_us", "p99, replica killed", "µs", "lower"),
        ),
        group="service",
        limit_s=240,
        quick_limit_s=150,
    ),
    Workload(
        "rpc_sync_rtt",
        "rpc_sync of a no-op function to another worker (torch.distributed.rpc API).",
        _latency(),
        group="rpc",
        limit_s=90,
        quick_limit_s=60,
    ),
    Workload(
        "rpc_async_throughput",
        "rpc_async of a no-op function: issue N, then wait for all.",
        (Row("calls_per_s", "throughput", "calls/s", "higher"),),
        group="rpc",
    ),
    Workload(
        "rpc_tensor_64m",
        "rpc_sync with a 64 MiB tensor argument; the callee fingerprints it.",
        _mbps(),
        group="rpc",
    ),
)

GROUPS = tuple(dict.fromkeys(w.group for w in WORKLOADS))

_BY_NAME = {w.name: w for w in WORKLOADS}


def by_name(name: str) -> Workload:
    """The workload called ``name``.

    Raises:
        KeyError: no such workload (the message lists the known ones).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(_BY_NAME)}") from None
