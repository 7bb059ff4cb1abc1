"""``python -m bench.bulk``: one large cast to many hosts on rate-limited links, star
against a chain (and a tree) of host agents.

Hosts are network namespaces on a bridge (``actormesh.testing.namespace_hosts``, root
needed) whose every link sends at most ``--rate`` (``tc`` token buckets on each host's
uplink and downlink and on the controller's uplink), one host agent each, ``--per-host``
workers each, one actor per worker. One call carries ``--mb`` MiB of bytes (a numpy
array) to every actor, which keeps it and answers its length; the call's wall time is
measured

- over **one link**: the cast to the actors of one host (the payload crosses one link);
- as a **star**: ``bulk_threshold`` 0, the controller sends the payload to every agent
  itself (its uplink carries it once per host);
- down a **chain** (``bulk_fanout`` 1) and any other ``--fanouts``: the controller sends
  it once, the agents forward it in ``--chunk`` KiB chunks.

Each way is timed ``--repeat`` times (the star once) after an untimed small transfer,
and the median reported. After each timed call an untimed one checks that every actor
holds bytes identical to the payload (SHA-256), and the bytes the controller sent on its
agent connections are counted. Results go to ``bench/results/bulk.json`` (``--out``) and
a Markdown table to stdout. ``bench/tests/test_bulk.py`` runs a small form so the script
cannot break unnoticed."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actormesh import Actor, ActorMesh, endpoint, host_mesh
from actormesh._hosts import Runtime
from actormesh.allocators import ExternalAllocator
from actormesh.testing import Network, namespace_hosts

BENCH = Path(__file__).resolve().parent


class Sink(Actor):
    """Keeps what it is sent; says its digest when asked (after the timing)."""

    def __init__(self) -> None:
        self.data: Any = None

    @endpoint
    def take(self, data: Any) -> int:
        self.data = data
        return len(data)

    @endpoint
    def digest(self) -> str:
        digest = hashlib.sha256(memoryview(self.data)).hexdigest()
        self.data = None
        return digest


class _SentBytes:
    """Bytes the controller sends on its connections to the agents."""

    def __init__(self, runtime: Runtime) -> None:
        self.count = 0
        self._originals: dict[Any, Callable[..., None]] = {}
        for conn in runtime.agents:
            self._originals[conn] = send = conn.send

            def counting(parts: Any, share: Any = None, _send: Callable[..., None] = send) -> None:
                self.count += sum(memoryview(part).nbytes for part in parts)
                _send(parts, share)

            conn.send = counting  # type: ignore[method-assign]

    def close(self) -> None:
        for conn, send in self._originals.items():
            conn.send = send  # type: ignore[method-assign]


def _cast(
    mesh: ActorMesh[Sink], payload: Any, want: str, repeat: int, **settings: int
) -> dict[str, Any]:
    """Timed calls of ``payload`` to every actor of ``mesh`` with these settings: the
    median of ``repeat``, after an untimed small one (a chain's agents dial each other
    on their first transfer: a cost paid once per pair, not per transfer)."""
    runtime = Runtime.get()
    saved = runtime.config
    runtime.config = saved.replace(**settings)
    try:
        mesh.take.call(payload[: 2 << 20]).get(timeout=600)
        times, sent = [], 0
        for _ in range(repeat):
            counter = _SentBytes(runtime)
            try:
                started = time.perf_counter()
                lengths = mesh.take.call(payload).get(timeout=1800)
                times.append(time.perf_counter() - started)
            finally:
                counter.close()
            sent = counter.count
            digests = mesh.digest.call().get(timeout=600)
            assert set(lengths.values()) == {len(payload)}, lengths
            assert set(digests.values()) == {want}, "an actor got bytes that differ"
    finally:
        runtime.config = saved
    return {
        "seconds": statistics.median(times),
        "runs": times,
        "controller_sent_bytes": sent,
        "actors": len(lengths),
    }


def run(network: Network, args: argparse.Namespace) -> dict[str, Any]:
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=120)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    future = host_mesh(len(network.hosts), allocator=allocator)
    agents = [network.start_agent(host, address, allocator.secret) for host in network.hosts]
    try:
        return _measure(future.get(timeout=180), args)
    except BaseException:
        for agent in agents:  # what an agent that ended said, for the record
            if agent.poll() is not None and agent.stderr is not None:
                print(f"agent {agent.pid} ended ({agent.returncode}):", file=sys.stderr)
                print(agent.stderr.read()[-2000:], file=sys.stderr)
                break
        raise
    finally:
        allocator.close()


def _measure(hosts: Any, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    procs = hosts.spawn_procs(per_host={"gpus": args.per_host})
    mesh = procs.spawn("sink", Sink)
    payload = np.random.default_rng(0).integers(0, 256, args.mb << 20, dtype=np.uint8)
    want = hashlib.sha256(memoryview(payload)).hexdigest()
    # Connections and imports warmed on a small cast (a chain dials its agents on the
    # first transfer: included below, as a first sync would pay it).
    mesh.take.call(payload[:1024]).get(timeout=120)
    mesh.digest.call().get(timeout=120)
    chunk = args.chunk << 10
    results: dict[str, Any] = {}
    one = mesh.slice(hosts=0)
    results["one_link"] = _cast(one, payload, want, args.repeat, bulk_threshold=0)
    if not args.no_star:  # (once: it takes hosts x as long)
        results["star"] = _cast(mesh, payload, want, 1, bulk_threshold=0)
    for fanout in args.fanouts:
        name = "chain" if fanout == 1 else f"tree_fanout_{fanout}"
        results[name] = _cast(
            mesh,
            payload,
            want,
            args.repeat,
            bulk_threshold=1 << 20,
            bulk_fanout=fanout,
            bulk_chunk=chunk,
        )
    procs.stop().get(timeout=120)
    hosts.shutdown().get(timeout=120)
    return results


def _table(results: dict[str, Any]) -> str:
    single = results["ways"]["one_link"]["seconds"]
    head = (
        f"{results['mb']} MiB to {results['hosts']} hosts x {results['per_host']} "
        f"workers, links at {results['rate']}"
    )
    lines = [f"| {head} | seconds | x one link | controller sent, MiB |", "|---|---|---|---|"]
    lines.append(f"| link's nominal time | {results['nominal_s']:.2f} | | |")
    for name, way in results["ways"].items():
        lines.append(
            f"| {name.replace('_', ' ')} | {way['seconds']:.2f} | {way['seconds'] / single:.2f}"
            f" | {way['controller_sent_bytes'] / 2**20:,.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--per-host", type=int, default=1)
    parser.add_argument("--mb", type=int, default=256, help="payload, MiB")
    parser.add_argument("--rate", default="1gbit", help="every link's rate (tc notation)")
    parser.add_argument("--chunk", type=int, default=256, help="bulk chunk, KiB")
    parser.add_argument(
        "--fanouts", type=lambda text: [int(f) for f in text.split(",")], default=[1, 2]
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (median)")
    parser.add_argument("--no-star", action="store_true", help="skip the star (slow)")
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "bulk.json")
    args = parser.parse_args(argv)
    os.environ["ACTORMESH_OUTPUT"] = "off"
    # A star queues a whole payload per agent on one slow uplink: heartbeats wait behind
    # it on each agent's connection (minutes, at 16 hosts), and would end the agents.
    os.environ.setdefault("ACTORMESH_HEARTBEAT_TIMEOUT", "3600")
    try:
        with namespace_hosts(args.hosts, rate=args.rate) as network:
            ways = run(network, args)
    except PermissionError as error:
        print(f"bench.bulk needs network namespaces (root): {error}", file=sys.stderr)
        return 2
    bits = float(args.rate.lower().removesuffix("bit").removesuffix("m").removesuffix("g"))
    per_second = bits * (1e9 if args.rate.lower().endswith("gbit") else 1e6)
    results = {
        "hosts": args.hosts,
        "per_host": args.per_host,
        "mb": args.mb,
        "rate": args.rate,
        "chunk_kib": args.chunk,
        "nominal_s": (args.mb << 20) * 8 / per_second,
        "ways": ways,
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
