"""``python -m bench.scale``: a mesh across many hosts, through host agents and flat.

Hosts are network namespaces on a bridge (``actormesh.testing.namespace_hosts``, root
needed). The same processes (``--hosts`` x ``--per-host``) are reached two ways:

- **agents**: one host agent per host (``actormesh host --join``), ``host_mesh`` +
  ``spawn_procs``; the controller sends one frame per host per cast and gets one
  gathered reply frame per host;
- **tree** (with ``--fan-out K``): the same agents forming a tree of fan-out K
  (``host_mesh(fan_out=K)``): the controller sends at most K frames per cast, the agents
  forward and merge the replies per subtree;
- **flat**: every process joins the controller itself (``actormesh worker --join``);
  the controller sends one frame per process and reads one reply per process.

Every way is opened at once (the agents of one level and of the tree side by side on
each host), then measured in interleaved rounds (``--rounds``), so a machine whose load
changes meanwhile weighs on every way alike. For each: the time to spawn the
processes, the latency of ``call`` + gather (median and p99), the controller's CPU time
per call (its whole process, every thread), and the frames the controller sent per
cast (counted on its connections). Then a mesh of
``--actors`` actors (several per process, ``ProcMesh.repeat``) is spawned through the
agents (and through the tree) and called. Results go to ``bench/results/scale.json`` and
``bench/figures/scale.png`` (``--out``, ``--figure``), and a Markdown table to stdout.
``bench/tests/test_scale.py`` runs a small form (2 hosts) so the script cannot break
unnoticed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actormesh import Actor, ActorMesh, endpoint, host_mesh, proc_mesh
from actormesh._core import headers
from actormesh._hosts import Runtime
from actormesh.allocators import ExternalAllocator
from actormesh.testing import Network, namespace_hosts

BENCH = Path(__file__).resolve().parent


class Echo(Actor):
    """The actor every process hosts: answers at once."""

    @endpoint
    def echo(self, value: int) -> int:
        return value


# What carries a cast out of the controller.
_CAST_KINDS = (headers.CALL, headers.CAST, headers.RELAY, headers.TREE_CAST, headers.PLANNED_CAST)


def _frames_per_cast(mesh: ActorMesh[Echo]) -> int:
    """Frames the controller sends for one ``call`` to ``mesh`` (CALL, RELAY, CAST,
    TREE_CAST or PLANNED_CAST)."""
    runtime = Runtime.get()
    sent = 0
    conns = {
        *runtime.agents,
        *(conn for conn in runtime._conns.values() if conn.peer.startswith("tcp://")),
    }
    originals = {}
    for conn in conns:
        originals[conn] = conn.send

        def counting(parts: Any, share: Any = None, _send: Callable[..., None] = conn.send) -> None:
            nonlocal sent
            kind = headers.decode(parts[0])[0]
            if kind in _CAST_KINDS:
                sent += 1
            _send(parts, share)

        conn.send = counting  # type: ignore[method-assign]
    try:
        mesh.echo.call(0).get(timeout=60)
    finally:
        for conn, send in originals.items():
            conn.send = send  # type: ignore[method-assign]
    return sent


def _timed_calls(mesh: ActorMesh[Echo], calls: int) -> tuple[list[float], float]:
    """The latency of each of ``calls`` calls + gathers, and the controller's CPU time."""
    latencies = []
    cpu = time.process_time()
    for i in range(calls):
        started = time.perf_counter()
        mesh.echo.call(i).get(timeout=60)
        latencies.append(time.perf_counter() - started)
    return latencies, time.process_time() - cpu


def _summary(latencies: list[float], cpu: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "gather_median_us": statistics.median(ordered) * 1e6,
        "gather_p99_us": ordered[int(len(ordered) * 0.99)] * 1e6,
        "controller_cpu_per_call_us": cpu / len(ordered) * 1e6,
    }


def _measure(meshes: dict[str, ActorMesh[Echo]], calls: int, rounds: int) -> dict[str, Any]:
    """``calls`` calls + gathers on each mesh, in ``rounds`` interleaved rounds (so a
    machine whose load changes meanwhile weighs on every way alike)."""
    # One actor of the last host (the deepest in a tree), by ``call_one``.
    last = {way: _last_actor(mesh) for way, mesh in meshes.items()}
    for way, mesh in meshes.items():
        for _ in range(20):  # warm up connections and caches
            mesh.echo.call(1).get(timeout=60)
            last[way].echo.call_one(1).get(timeout=60)
    latencies: dict[str, list[float]] = {way: [] for way in meshes}
    ones: dict[str, list[float]] = {way: [] for way in meshes}
    cpu = dict.fromkeys(meshes, 0.0)
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for way, mesh in meshes.items():
            these, spent = _timed_calls(mesh, per_round)
            latencies[way].extend(these)
            cpu[way] += spent
            ones[way].extend(_timed_call_ones(last[way], per_round))
    return {
        way: {**_summary(latencies[way], cpu[way]), "one_median_us": _median_us(ones[way])}
        for way in meshes
    }


def _last_actor(mesh: ActorMesh[Echo]) -> ActorMesh[Echo]:
    """The first actor of the mesh's last host (the deepest in a tree of agents)."""
    hosts, *others = mesh.sizes.items()
    actor: ActorMesh[Echo] = mesh.slice(
        **{hosts[0]: hosts[1] - 1}, **dict.fromkeys(dict(others), 0)
    )
    return actor


def _timed_call_ones(actor: ActorMesh[Echo], calls: int) -> list[float]:
    """The latency of each of ``calls`` ``call_one`` round trips to ``actor``."""
    latencies = []
    for i in range(calls):
        started = time.perf_counter()
        actor.echo.call_one(i).get(timeout=60)
        latencies.append(time.perf_counter() - started)
    return latencies


def _median_us(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1e6


class _Way:
    """One way of reaching the same hosts' processes, opened; ``close()`` ends it."""

    def __init__(self, mesh: ActorMesh[Echo], result: dict[str, Any], close: Any) -> None:
        self.mesh = mesh
        self.result = result
        self.close = close
        self.procs: Any = None


def _agents(network: Network, per_host: int, fan_out: int) -> _Way:
    hosts_count = len(network.hosts)
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=120)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    started = time.monotonic()
    future = host_mesh(hosts_count, allocator=allocator, fan_out=fan_out)
    for host in network.hosts:
        network.start_agent(host, address, allocator.secret)
    hosts = future.get(timeout=180)
    agents_s = time.monotonic() - started
    started = time.monotonic()
    procs = hosts.spawn_procs(per_host={"gpus": per_host})
    mesh = procs.spawn("echo", Echo)
    mesh.echo.call(0).get(timeout=120)
    spawn_s = time.monotonic() - started

    def close() -> None:
        procs.stop().get(timeout=120)
        hosts.shutdown().get(timeout=120)
        allocator.close()

    way = _Way(mesh, {"agents_join_s": agents_s, "spawn_s": spawn_s}, close)
    way.procs = procs
    return way


def _many(way: _Way, hosts: int, per_host: int, actors: int, calls: int) -> dict[str, Any]:
    """A mesh of ``actors`` actors (several per process) through ``way``'s agents."""
    per_process = max(1, actors // (hosts * per_host))
    started = time.monotonic()
    many = way.procs.repeat(actors=per_process).spawn("many", Echo)
    answered = len(many.echo.call(0).get(timeout=180))
    spawned = time.monotonic() - started
    return {
        "actors": answered,
        "spawn_and_first_call_s": spawned,
        **_measure({"many": many}, max(10, calls // 10), 1)["many"],
    }


def _flat(network: Network, per_host: int) -> _Way:
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=180)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    started = time.monotonic()
    future = proc_mesh(hosts=len(network.hosts), gpus=per_host, allocator=allocator)
    for host in network.hosts:
        for _ in range(per_host):
            network.start_worker(host, address, allocator.secret)
    procs = future.get(timeout=240)
    mesh = procs.spawn("echo", Echo)
    mesh.echo.call(0).get(timeout=120)

    def close() -> None:
        procs.stop().get(timeout=120)
        allocator.close()

    return _Way(mesh, {"spawn_s": time.monotonic() - started}, close)


def _run(network: Network, args: argparse.Namespace) -> dict[str, Any]:
    """Open every way on ``network``, measure them interleaved, close them."""
    hosts = len(network.hosts)
    opened: dict[str, _Way] = {}
    try:
        opened["agents"] = _agents(network, args.per_host, max(2, hosts))  # one level
        if args.fan_out is not None:
            opened["tree"] = _agents(network, args.per_host, args.fan_out)
        opened["flat"] = _flat(network, args.per_host)
        meshes = {way: opened[way].mesh for way in opened}
        measured = _measure(meshes, args.calls, args.rounds)
        for way, opening in opened.items():
            opening.result.update(measured[way])
            opening.result["frames_per_cast"] = _frames_per_cast(opening.mesh)
        for way in ("agents", "tree"):
            if way in opened:
                many = _many(opened[way], hosts, args.per_host, args.actors, args.calls)
                opened[way].result["many"] = many
        return {way: opening.result for way, opening in opened.items()}
    finally:
        for opening in reversed(opened.values()):
            opening.close()


def _table(results: dict[str, Any]) -> str:
    ways = [("agents", "through host agents, one level")]
    if "tree" in results:
        ways.append(("tree", f"through a tree of agents, fan-out {results['fan_out']}"))
    ways.append(("flat", "flat (every process to the controller)"))
    rows = [
        ("frames sent by the controller per cast", "frames_per_cast", "{:.0f}"),
        ("spawn of the processes, s", "spawn_s", "{:.2f}"),
        ("call + gather, median, µs", "gather_median_us", "{:,.0f}"),
        ("call + gather, p99, µs", "gather_p99_us", "{:,.0f}"),
        ("controller CPU per call, µs", "controller_cpu_per_call_us", "{:,.0f}"),
        ("call_one to the last host, median, µs", "one_median_us", "{:,.0f}"),
    ]
    head = f"{results['hosts']} hosts x {results['per_host']} processes"
    lines = [f"| {head} | " + " | ".join(title for _, title in ways) + " |"]
    lines.append("|---" * (len(ways) + 1) + "|")
    for label, key, form in rows:
        cells = " | ".join(form.format(results[way][key]) for way, _ in ways)
        lines.append(f"| {label} | {cells} |")
    for way, title in ways[:-1]:
        many = results[way]["many"]
        per_process = many["actors"] // (results["hosts"] * results["per_host"])
        lines.append("")
        lines.append(
            f"{many['actors']} actors ({per_process} per process, {title}): spawn + first "
            f"call {many['spawn_and_first_call_s']:.2f} s; call + gather median "
            f"{many['gather_median_us'] / 1000:.1f} ms, p99 "
            f"{many['gather_p99_us'] / 1000:.1f} ms; controller CPU per call "
            f"{many['controller_cpu_per_call_us'] / 1000:.1f} ms"
        )
    return "\n".join(lines)


def _chart(results: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    keys = [
        ("gather_median_us", "call + gather median (µs)"),
        ("controller_cpu_per_call_us", "controller CPU per call (µs)"),
        ("frames_per_cast", "frames per cast"),
    ]
    figure, axes = plt.subplots(1, len(keys), figsize=(11, 3.4))
    ways = [("agents", "one level", "#2b7bba")]
    if "tree" in results:
        ways.append(("tree", f"tree (k={results['fan_out']})", "#3a9a5b"))
    ways.append(("flat", "flat", "#b0b0b0"))
    for axis, (key, title) in zip(axes, keys, strict=True):
        values = [results[way][key] for way, _, _ in ways]
        axis.bar([label for _, label, _ in ways], values, color=[c for _, _, c in ways])
        axis.set_title(title, fontsize=10)
        for x, value in enumerate(values):
            axis.annotate(f"{value:,.0f}", (x, value), ha="center", va="bottom", fontsize=9)
    figure.suptitle(
        f"{results['hosts']} hosts x {results['per_host']} processes (network namespaces)"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--per-host", type=int, default=4)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--actors", type=int, default=1024)
    parser.add_argument(
        "--fan-out",
        type=int,
        default=None,
        help="also measure the agents as a tree of this fan-out (host_mesh(fan_out=))",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="the calls of each way are made in this many rounds, the ways interleaved",
    )
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "scale.json")
    parser.add_argument("--figure", type=Path, default=BENCH / "figures" / "scale.png")
    args = parser.parse_args(argv)
    os.environ["ACTORMESH_OUTPUT"] = "off"
    if args.fan_out is not None and (args.fan_out < 2 or args.fan_out >= args.hosts):
        parser.error(f"--fan-out must be at least 2 and below --hosts ({args.hosts})")
    try:
        with namespace_hosts(args.hosts) as network:
            ways = _run(network, args)
    except PermissionError as error:
        print(f"bench.scale needs network namespaces (root): {error}", file=sys.stderr)
        return 2
    results = {
        "hosts": args.hosts,
        "per_host": args.per_host,
        "calls": args.calls,
        "rounds": args.rounds,
        **ways,
        **({} if args.fan_out is None else {"fan_out": args.fan_out}),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    _chart(results, args.figure)
    print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
