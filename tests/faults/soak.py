"""Soak: a realistic mixed load with random kills for a given time, watched for growth.

``scripts/soak --minutes 30`` (or ``python -m tests.faults.soak``) runs, against one mesh of
four workers with ``restart="rank"``:

- sync ``call`` + gather over all ranks, and ``call_one`` to each, in a loop;
- an asyncio caller doing ``choose`` and ``call_one`` (reply routes included);
- ``stream`` over all ranks;
- tensors of 4 MiB there and back (shared memory);
- a killer that SIGKILLs a random worker every few seconds (restarts bring it back).

Every ``--every`` seconds it samples the controller's and the workers' resident memory
and open descriptors, and at the end prints the samples and a table of figures. It fails
(exit status 1) when a call ends in anything but its value or the death of its actor,
when the controller's descriptors or memory grow between the second and the last quarter
of the run (the first is warm-up), or when a process or file is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)

from faults_actors import Worker  # noqa: E402

import actormesh  # noqa: E402
from actormesh import ActorDiedError, ActorMesh, proc_mesh  # noqa: E402

RANKS = 4
TENSOR_BYTES = 4 << 20


@dataclass
class Tally:
    """What the load saw, shared by its threads."""

    ok: Counter[str] = field(default_factory=Counter)
    died: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    # The most recent latencies only: a list of every one would itself look like a leak.
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=50_000))
    kills: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outcome(self, kind: str, started: float, error: BaseException | None) -> None:
        with self.lock:
            if error is None:
                self.ok[kind] += 1
                self.latencies.append(time.perf_counter() - started)
            elif isinstance(error, ActorDiedError | actormesh.SupervisionError):
                self.died[kind] += 1
            else:
                self.wrong.append(f"{kind}: {type(error).__name__}: {error}")


def _status(pid: int) -> tuple[float, int]:
    """``(RSS in MiB, open descriptors)`` of ``pid`` (zeros when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        rss = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS"))
        return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0.0, 0


def _call(tally: Tally, kind: str, fn: Any) -> None:
    started = time.perf_counter()
    try:
        fn()
    except Exception as error:
        tally.outcome(kind, started, error)
    else:
        tally.outcome(kind, started, None)


def _sync_load(mesh: ActorMesh[Worker], tally: Tally, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        one = mesh.slice(gpus=n % RANKS)
        _call(tally, "call", lambda n=n: mesh.echo.call(n).get(timeout=60))
        _call(tally, "call_one", lambda n=n, one=one: one.echo.call_one(n).get(timeout=60))


def _stream_load(mesh: ActorMesh[Worker], tally: Tally, stop: threading.Event) -> None:
    while not stop.is_set():

        def drain() -> None:
            for future in mesh.echo.stream("s").with_timeout(60):
                future.get()

        _call(tally, "stream", drain)


def _tensor_load(mesh: ActorMesh[Worker], tally: Tally, stop: threading.Event) -> None:
    import torch

    payload = torch.ones(TENSOR_BYTES // 4)
    n = 0
    while not stop.is_set():
        n += 1
        one = mesh.slice(gpus=n % RANKS)

        def round_trip(one: ActorMesh[Worker] = one) -> None:
            back = one.echo.call_one(payload).get(timeout=60)
            if back.shape != payload.shape:
                raise AssertionError("a tensor came back with another shape")

        _call(tally, "tensor", round_trip)


def _async_load(mesh: ActorMesh[Worker], tally: Tally, stop: threading.Event) -> None:
    async def run() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            for kind, future in (
                ("choose", mesh.aecho.choose(n)),
                ("async call_one", mesh.slice(gpus=n % RANKS).aecho.call_one(n)),
            ):
                started = time.perf_counter()
                try:
                    await future.wait(60)
                except Exception as error:
                    tally.outcome(kind, started, error)
                else:
                    tally.outcome(kind, started, None)

    asyncio.run(run())


def _killer(mesh: ActorMesh[Worker], tally: Tally, stop: threading.Event, every: float) -> None:
    rng = random.Random(1)
    while not stop.wait(rng.uniform(every / 2, every * 1.5)):
        rank = rng.randrange(RANKS)
        try:
            pid = mesh.slice(gpus=rank).pid.call_one().get(timeout=60)
        except Exception:
            continue  # it is restarting from an earlier kill
        os.kill(pid, signal.SIGKILL)
        with tally.lock:
            tally.kills += 1


def _workers(mesh: ActorMesh[Worker]) -> list[int]:
    try:
        return list(mesh.pid.call().get(timeout=30).values())
    except Exception:
        return []


def soak(minutes: float, every: float, kill_every: float) -> int:
    """Run the soak; prints its tables; returns the exit status."""
    actormesh.set_failure_hook(lambda failure: None)  # restarts report nothing; deaths: counted
    files_before = set(Path(tempfile.gettempdir()).glob("actormesh-*"))
    tally = Tally()
    samples: list[tuple[float, float, int, float, int]] = []
    stop = threading.Event()
    started = time.monotonic()
    procs = proc_mesh(gpus=RANKS, restart="rank", max_restarts=100_000, restart_window=1.0).get(
        timeout=60
    )
    mesh = procs.spawn("soak", Worker)
    loads = [_sync_load, _stream_load, _tensor_load, _async_load]
    threads = [threading.Thread(target=load, args=(mesh, tally, stop)) for load in loads]
    threads.append(threading.Thread(target=_killer, args=(mesh, tally, stop, kill_every)))
    for thread in threads:
        thread.start()
    deadline = started + minutes * 60
    try:
        while time.monotonic() < deadline:
            time.sleep(min(every, max(0.0, deadline - time.monotonic())))
            rss, fds = _status(os.getpid())
            workers = [_status(pid) for pid in _workers(mesh)]
            samples.append(
                (
                    time.monotonic() - started,
                    rss,
                    fds,
                    max((w[0] for w in workers), default=0.0),
                    sum(w[1] for w in workers),
                )
            )
            print(_sample_line(samples[-1], tally), flush=True)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
        procs.stop().get(timeout=60)
    took = time.monotonic() - started
    time.sleep(1.0)  # the stopped workers' sockets close on the loop thread
    files_left = set(Path(tempfile.gettempdir()).glob("actormesh-*")) - files_before
    table, ok = _summary(tally, samples, took, files_left)
    print()
    print(table)
    return 0 if ok else 1


def _sample_line(sample: tuple[float, float, int, float, int], tally: Tally) -> str:
    at, rss, fds, worker_rss, worker_fds = sample
    done = sum(tally.ok.values())
    return (
        f"  t={at:7.0f} s  controller {rss:6.1f} MiB {fds:4d} fds   workers max {worker_rss:6.1f}"
        f" MiB, {worker_fds:4d} fds in all   calls ok {done:9d}  kills {tally.kills}"
    )


def _growth(values: list[float]) -> tuple[float, float]:
    """Medians of the second and the last quarter of ``values`` (the first is warm-up:
    allocator arenas, the latency window and connection buffers filling)."""
    quarter = max(1, len(values) // 4)
    return statistics.median(values[quarter : 2 * quarter]), statistics.median(values[-quarter:])


def _summary(
    tally: Tally,
    samples: list[tuple[float, float, int, float, int]],
    took: float,
    files_left: set[Path],
) -> tuple[str, bool]:
    rss_first, rss_last = _growth([s[1] for s in samples]) if samples else (0.0, 0.0)
    fds_first, fds_last = _growth([float(s[2]) for s in samples]) if samples else (0.0, 0.0)
    wrss_first, wrss_last = _growth([s[3] for s in samples]) if samples else (0.0, 0.0)
    ordered = sorted(tally.latencies)
    p50 = ordered[len(ordered) // 2] * 1e6 if ordered else 0.0
    p99 = ordered[int(len(ordered) * 0.99)] * 1e6 if ordered else 0.0
    rows = [
        ("duration", f"{took / 60:.1f} min"),
        ("calls answered", f"{sum(tally.ok.values())} ({dict(tally.ok)})"),
        ("calls failed by a death", f"{sum(tally.died.values())} ({dict(tally.died)})"),
        ("calls failed otherwise", str(len(tally.wrong))),
        ("workers killed", str(tally.kills)),
        ("latency of answered calls, p50 / p99", f"{p50:.0f} µs / {p99:.0f} µs"),
        ("controller RSS, 2nd / last quarter", f"{rss_first:.1f} / {rss_last:.1f} MiB"),
        ("controller descriptors, 2nd / last quarter", f"{fds_first:.0f} / {fds_last:.0f}"),
        ("largest worker RSS, 2nd / last quarter", f"{wrss_first:.1f} / {wrss_last:.1f} MiB"),
        ("files left on disk", str(len(files_left))),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"actormesh soak ({os.cpu_count()} cores, {RANKS} workers, restart='rank')"]
    lines += [f"  {label:<{width}}  {value}" for label, value in rows]
    lines += [f"  ! {problem}" for problem in tally.wrong[:10]]
    # Growth: descriptors must come back to where they were; memory may wobble (allocator
    # arenas, the latency list itself) but not climb by more than a tenth.
    ok = (
        not tally.wrong
        and sum(tally.ok.values()) > 0
        and fds_last <= fds_first + 4
        and rss_last <= rss_first * 1.1 + 8
        and not files_left
    )
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long (default 5)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--kill-every", type=float, default=5.0, help="mean seconds between kills")
    args = parser.parse_args(argv)
    return soak(args.minutes, args.every, args.kill_every)


if __name__ == "__main__":
    sys.exit(main())
