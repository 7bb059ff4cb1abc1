"""``python -m bench.simulate``: the controller's cost of a job of 16 to 10,000 hosts,
with the real controller and host-agent code and simulated workers.

A measuring instrument, not a proof that the system works (the namespace-host tests
are). Each host is a real ``Agent`` on a runtime of its own, joined to the real
controller runtime by an in-memory link; its workers answer at once without being
processes (``bench/sim_hosts.py`` says exactly what is simulated). The controller is
this process' ordinary ``Runtime``, driven through the public API: ``host_mesh`` (with a
``HostAllocator`` of simulated hosts), ``spawn_procs``, ``spawn`` and ``call``.

Each host count runs in a fresh subprocess (``--one``), and reports:

- frames and bytes the controller sends and receives per cast (by kind);
- the controller's CPU per cast: the thread that calls (prepares and sends) plus the
  runtime's loop thread (reads and merges the replies), by thread CPU clocks, and the
  simulated agents' thread beside it;
- the wall time of a ``call`` + gather of every reply;
- the spawn: host agents joining, ``spawn_procs``, the actors' ``spawn`` + first call,
  with the frames and bytes the controller sent for it;
- the time to detect a dead agent (its link closes, as a process exit or a reset
  connection closes TCP) and a frozen one (silent: found by missed heartbeats); a dead
  interior agent once casts go through a tree of agents (``--fan-out``);
- the process' memory per host (controller, agent and simulated workers together).

Results: ``bench/results/simulate.json`` and ``bench/figures/simulate.png`` (``--out``,
``--figure``), a table on stdout. docs/multihost.md ("Simulating thousands of hosts")
explains the figures and the latency model derived from them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import inspect
import json
import operator
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.sim_model import fit, one_level_us, tree_us

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SIZES = (16, 256, 1024, 4096, 10_000)

# Names a build that casts through a tree of agents may give its fan-out: an argument of
# host_mesh, or a Config field (read from ACTORMESH_<NAME>).
_FAN_OUT_NAMES = ("fan_out", "cast_fan_out", "tree_fan_out")


def tree_support() -> tuple[str, str] | None:
    """How this build takes a cast tree's fan-out: ``("argument", name)`` of
    ``host_mesh``, ``("config", name)``, or ``None`` (casts go one level deep)."""
    from actormesh import Config, host_mesh

    parameters = inspect.signature(host_mesh).parameters
    for name in _FAN_OUT_NAMES:
        if name in parameters:
            return ("argument", name)
    fields = {field.name for field in dataclasses.fields(Config)}
    for name in _FAN_OUT_NAMES:
        if name in fields:
            return ("config", name)
    return None


def _thread_cpu(ident: int) -> float:
    """CPU seconds used so far by the thread ``ident`` of this process."""
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def _controller_cpu(loop_ident: int) -> float:
    """CPU seconds the controller used so far: this (calling) thread and its loop's.
    (Heartbeats included: an operation that takes seconds shows them.)"""
    return time.thread_time() + _thread_cpu(loop_ident)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _casts_for(hosts: int, per_host: int, casts: int) -> int:
    """Casts to time at this size: ``casts``, fewer as the actors grow (at least 2)."""
    return max(2, min(casts, 400_000 // (hosts * per_host)))


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one host count in this process (see the module docstring)."""
    os.environ.update(
        ACTORMESH_OUTPUT="off",
        ACTORMESH_EVENT_LOG="0",
        ACTORMESH_PROGRESS="never",
        ACTORMESH_SPAWN_TIMEOUT=str(args.spawn_timeout),
        ACTORMESH_HEARTBEAT_INTERVAL=str(args.heartbeat_interval),
        ACTORMESH_HEARTBEAT_TIMEOUT=str(args.heartbeat_timeout),
    )
    from actormesh import Actor, endpoint, host_mesh
    from bench.sim_hosts import LoopThread, SimControllerRuntime, SimulatedHosts

    class Echo(Actor):
        """What every simulated actor stands for (its simulated worker answers its rank)."""

        @endpoint
        def echo(self, value: int) -> int:
            return value

    hosts_count, per_host = args.one, args.per_host
    actors = hosts_count * per_host * args.actors_per_proc
    tree = tree_support()
    extra: dict[str, Any] = {}
    fan_out = None
    if args.fan_out and tree is not None:
        fan_out = args.fan_out
        if tree[0] == "argument":
            extra[tree[1]] = fan_out
        else:
            os.environ[f"ACTORMESH_{tree[1].upper()}"] = str(fan_out)
    result: dict[str, Any] = {
        "hosts": hosts_count,
        "procs_per_host": per_host,
        "actors": actors,
        "fan_out": fan_out,
        "tree": None if tree is None else f"{tree[0]} {tree[1]}",
    }
    # The controller's runtime, before anything starts an ordinary one: it reaches the
    # simulated agents it dials (a tree's, say) over in-memory links.
    runtime = SimControllerRuntime.get()
    loop_ident = runtime._thread.ident if runtime._thread else None
    assert loop_ident is not None
    agents = LoopThread("sim-agents")
    sim = SimulatedHosts(agents.loop)
    runtime.dialing = sim.dialing
    tally = sim.tally

    def take_tally() -> dict[str, dict[str, int]]:
        taken = {
            "sent": dict(tally.sent),
            "sent_bytes": dict(tally.sent_bytes),
            "received": dict(tally.received),
            "received_bytes": dict(tally.received_bytes),
        }
        tally.reset()
        return taken

    rss = _rss_bytes()
    tally.on = True
    started = time.perf_counter()
    hosts = host_mesh(hosts_count, allocator=sim, **extra).get(timeout=args.spawn_timeout)
    result["join_s"] = time.perf_counter() - started
    result["join_frames"] = take_tally()
    result["agent_connections"] = _agent_connections(runtime)
    started, cpu = time.perf_counter(), _controller_cpu(loop_ident)
    procs = hosts.spawn_procs(per_host={"gpus": per_host})
    result["spawn_procs_s"] = time.perf_counter() - started
    result["spawn_procs_cpu_s"] = _controller_cpu(loop_ident) - cpu
    result["spawn_procs_frames"] = take_tally()
    started = time.perf_counter()
    if args.actors_per_proc > 1:
        procs = procs.repeat(actors=args.actors_per_proc)
    mesh = procs.spawn("echo", Echo)
    first = mesh.echo.call(0).get(timeout=args.spawn_timeout)
    result["spawn_actors_s"] = time.perf_counter() - started
    result["spawn_actors_frames"] = take_tally()
    tally.on = False
    result["memory_per_host_bytes"] = (_rss_bytes() - rss) / hosts_count
    result["gathered"] = len(first)
    result["gathered_ranks_ok"] = sorted(first.values()) == list(range(actors))
    # On real hosts the agents' objects live in their own processes: here they would make
    # every full collection of this one scan millions of objects, on whichever thread
    # happens to trigger it (the controller's loop, often). Frozen out of the collector,
    # as everything made so far; what the casts make is collected as usual.
    del first
    gc.collect()
    gc.freeze()

    # Casts: controller CPU (calling thread + loop thread), agents' CPU, wall: a call
    # that gathers every value, a reducing call, and a broadcast (nothing comes back).
    mesh.echo.call(1).get(timeout=args.spawn_timeout)  # warm
    count = _casts_for(hosts_count, per_host * args.actors_per_proc, args.casts)
    clocks = (loop_ident, agents.ident)

    def gather(i: int) -> None:
        assert len(mesh.echo.call(i).get(timeout=args.spawn_timeout)) == actors

    total = sum(range(actors))

    def reduce(i: int) -> None:
        assert mesh.echo.reduce(operator.add)(i).get(timeout=args.spawn_timeout) == total

    result.update(_timed("cast", gather, count, clocks))
    result.update(_timed("reduce", reduce, count, clocks))
    result.update(_timed("broadcast", mesh.echo.broadcast, count, clocks))
    for name, cast in (("cast", gather), ("reduce", reduce), ("broadcast", mesh.echo.broadcast)):
        result[f"{name}_calls"], result[f"{name}_calls_wall_s"] = _calls_made(runtime.loop, cast)
    mesh.echo.call(0).get(timeout=args.spawn_timeout)  # (the broadcasts are through)
    tally.on = True
    counted = mesh.echo.call(2).get(timeout=args.spawn_timeout)
    tally.on = False
    assert len(counted) == actors
    per_cast = take_tally()
    result["cast_frames"] = per_cast
    _cast_traffic(result)

    # The controller idle: what watching the agents (heartbeats) costs it per second.
    tally.on = True
    loop0, wall0 = _thread_cpu(loop_ident), time.perf_counter()
    calls, _ = _calls_made(runtime.loop, lambda i: time.sleep(args.idle))
    idle_wall = time.perf_counter() - wall0
    result["idle_calls_per_s"] = calls / idle_wall
    result["idle_cpu_loop_us_per_s"] = (_thread_cpu(loop_ident) - loop0) / idle_wall * 1e6
    tally.on = False
    idle = take_tally()
    result["idle_frames_per_s"] = sum(idle["sent"].values()) / idle_wall

    result.update(_slice_cast(args, mesh, sim, hosts_count))
    result.update(_detect(args, hosts, mesh, sim, fan_out))
    if hosts_count <= args.max_shutdown_hosts:
        # What the loop still does about the deaths above (a dead agent's subtree failed,
        # the tree's heartbeats planned again) is not the stop's: let it finish first.
        runtime.run_sync(asyncio.sleep(0))
        started, cpu = time.perf_counter(), _controller_cpu(loop_ident)
        tally.on = True
        procs.stop().get(timeout=args.spawn_timeout)
        tally.on = False
        result["stop_procs_s"] = time.perf_counter() - started
        result["stop_procs_cpu_s"] = _controller_cpu(loop_ident) - cpu
        result["stop_procs_frames"] = take_tally()
        started = time.perf_counter()
        hosts.shutdown().get(timeout=args.spawn_timeout)
        result["shutdown_hosts_s"] = time.perf_counter() - started
    sys.stdout.flush()
    return result


def _timed(name: str, cast: Any, count: int, clocks: tuple[int, int]) -> dict[str, float | int]:
    """``cast(i)`` ``count`` times: the medians of its wall time and of the CPU the
    calling thread, the controller's loop thread and the simulated agents' spent on it
    (thread CPU clocks), as ``<name>_wall_ms``, ``<name>_cpu_caller_us``, ... ."""
    loop_ident, agents_ident = clocks
    rows = []
    for i in range(count):
        main0, loop0 = time.thread_time(), _thread_cpu(loop_ident)
        agents0 = _thread_cpu(agents_ident)
        wall0 = time.perf_counter()
        cast(i)
        wall = time.perf_counter() - wall0
        rows.append(
            (
                wall,
                time.thread_time() - main0,
                _thread_cpu(loop_ident) - loop0,
                _thread_cpu(agents_ident) - agents0,
            )
        )
    return {
        f"{name}s_timed": len(rows),
        f"{name}_wall_ms": statistics.median(r[0] for r in rows) * 1e3,
        f"{name}_cpu_caller_us": statistics.median(r[1] for r in rows) * 1e6,
        f"{name}_cpu_loop_us": statistics.median(r[2] for r in rows) * 1e6,
        f"{name}_cpu_controller_us": statistics.median(r[1] + r[2] for r in rows) * 1e6,
        f"{name}_cpu_agents_us": statistics.median(r[3] for r in rows) * 1e6,
    }


def _calls_made(loop: Any, cast: Any) -> tuple[int, float]:
    """The Python and C functions the controller's calling thread and loop thread call
    for one ``cast(0)`` (``sys.setprofile`` on both), and its wall time: the controller's
    own work, counted rather than timed, so the simulated agents that share this
    interpreter (its lock, its collector) cannot blur it. (The heartbeats the loop
    answers meanwhile count too: ``_derive`` takes them out at their idle rate.)"""
    counts = {"caller": 0, "loop": 0}

    def counter(thread: str) -> Any:
        def count(frame: Any, event: str, arg: Any) -> None:
            if event in ("call", "c_call"):
                counts[thread] += 1  # (each thread its own key: no lost updates)

        return count

    def on_loop(profile: Any) -> None:
        done = threading.Event()

        def install() -> None:
            sys.setprofile(profile)
            done.set()

        loop.call_soon_threadsafe(install)
        done.wait(60)

    on_loop(counter("loop"))
    sys.setprofile(counter("caller"))
    started = time.perf_counter()
    try:
        cast(0)
    finally:
        sys.setprofile(None)
        wall = time.perf_counter() - started
        on_loop(None)
    return counts["caller"] + counts["loop"], wall


def _slice_cast(args: argparse.Namespace, mesh: Any, sim: Any, count: int) -> dict[str, Any]:
    """A cast to every host but the last (a slice): its bytes and controller CPU."""
    if count < 2 or count * args.per_host * args.actors_per_proc > args.max_slice_actors:
        return {"slice_cast_bytes": None}
    target = mesh.slice(hosts=slice(0, count - 1))
    target.echo.call(0).get(timeout=args.spawn_timeout)  # warm
    sim.tally.on = True
    started, cpu = time.perf_counter(), time.thread_time()
    target.echo.call(1).get(timeout=args.spawn_timeout)
    out = {
        "slice_cast_caller_cpu_us": (time.thread_time() - cpu) * 1e6,
        "slice_cast_wall_ms": (time.perf_counter() - started) * 1e3,
        "slice_cast_bytes": sum(sim.tally.sent_bytes.values()),
    }
    sim.tally.on = False
    sim.tally.reset()
    return out


def _detect(
    args: argparse.Namespace, hosts: Any, mesh: Any, sim: Any, fan_out: int | None
) -> dict[str, Any]:
    """How long a call waits on a dead and on a frozen agent before it fails; then that
    the other hosts answer the next cast.

    Each waiting call goes to the one host that fails (a slice of one host): a call to a
    slice of many names every rank of it in each header (see docs/multihost.md)."""
    count = len(hosts._hosts.links)
    out: dict[str, Any] = {}
    if count < 3:
        return out
    links = hosts._hosts.links

    def failed_after(index: int, how: str, name: str) -> None:
        host = sim.host_of(links[index])
        host.freeze()  # the call below must wait on it
        out[name + "_last_answer_age"] = _last_answer_age(host)
        future = mesh.slice(hosts=index).echo.call(0)
        started = time.perf_counter()
        if how == "die":
            host.die()
        out[name] = None
        try:
            future.get(timeout=args.heartbeat_timeout * 3 + 30)
        except TimeoutError:
            out[name + "_error"] = "the call was still waiting"
        except Exception as error:
            out[name] = time.perf_counter() - started
            out[name + "_error"] = f"{type(error).__name__}: {error}"[:300]
        else:
            out[name + "_error"] = "the call answered"

    # A leaf: the last host (a leaf in any tree the hosts form, first hosts on top).
    failed_after(count - 1, "die", "detect_dead_leaf_s")
    failed_after(count - 2, "freeze", "detect_frozen_leaf_s")
    first = 0
    out["detect_dead_interior_s"] = None
    if fan_out is not None and count > fan_out:
        # Host 0 has children in a tree whose first hosts are its top level.
        failed_after(0, "die", "detect_dead_interior_s")
        first = 1
    out["after_deaths_answered"] = None
    if (count - 2 - first) * args.per_host * args.actors_per_proc <= args.max_slice_actors:
        alive = mesh.slice(hosts=slice(first, count - 2))
        answered = alive.echo.call(3).get(timeout=args.spawn_timeout)
        out["after_deaths_answered"] = len(answered)
    return out


def _agent_connections(runtime: Any) -> int:
    """How many of its agents the controller holds a connection of its own to (the
    others reach it through the agent above them: ``_hosts/_uplink.py``)."""
    routed = getattr(sys.modules.get("actormesh._hosts._routed"), "RoutedConnection", ())
    return sum(not isinstance(link.conn, routed) for link in runtime.agents.values())


def _last_answer_age(host: Any) -> float | None:
    """Seconds since the controller's heartbeat monitor last heard from ``host``'s agent
    (a frozen agent is declared dead that much sooner than its timeout)."""
    from actormesh._hosts import Runtime

    runtime = Runtime.get()
    monitor = runtime.children.heartbeat
    watched = None if monitor is None else monitor._watched.get(host.runtime.address)
    if watched is None:
        return None
    age: float = runtime.run_sync(_age(runtime.loop, watched))
    return age


async def _age(loop: Any, watched: Any) -> float:
    return float(loop.time() - watched.last_answer)


# -- the parent: one subprocess per size, then the table, the chart and the model -------


def _run_size(hosts: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.simulate", "--one", str(hosts)]
    for name in ("per_host", "actors_per_proc", "casts", "fan_out", "heartbeat_interval",
                 "heartbeat_timeout", "spawn_timeout", "idle", "max_slice_actors",
                 "max_shutdown_hosts"):  # fmt: skip
        value = getattr(args, name)
        if value is not None:
            cmd += [f"--{name.replace('_', '-')}", str(value)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.size_timeout
        )
    except subprocess.TimeoutExpired:
        return {"hosts": hosts, "error": f"did not finish within {args.size_timeout} s"}
    if done.returncode != 0:
        return {"hosts": hosts, "error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["run_s"] = time.monotonic() - started
    return result


def _fmt(value: Any, form: str) -> str:
    if value is None:
        return "—"
    return form.format(value)


ROWS = [
    ("frames sent by the controller per cast", "frames_sent_per_cast", "{:,.0f}"),
    ("frames received by the controller per cast", "frames_received_per_cast", "{:,.0f}"),
    ("bytes sent per cast", "bytes_sent_per_cast", "{:,.0f}"),
    ("bytes received per cast", "bytes_received_per_cast", "{:,.0f}"),
    ("controller CPU per cast, µs (caller + loop)", "cast_cpu_controller_us", "{:,.0f}"),
    ("  of which the calling thread, µs", "cast_cpu_caller_us", "{:,.0f}"),
    ("  of which the loop thread, µs", "cast_cpu_loop_us", "{:,.0f}"),
    ("  loop thread less its heartbeat work meanwhile, µs", "cast_cpu_loop_net_us", "{:,.0f}"),
    ("controller CPU per cast less heartbeats, µs", "cast_cpu_net_us", "{:,.0f}"),
    ("  per host, µs", "cpu_per_host_us", "{:,.1f}"),
    ("simulated agents' CPU per cast, µs", "cast_cpu_agents_us", "{:,.0f}"),
    ("controller CPU per reducing call, µs (caller + loop)", "reduce_cpu_controller_us", "{:,.0f}"),
    ("  of which the calling thread, µs", "reduce_cpu_caller_us", "{:,.0f}"),
    ("  less heartbeats, µs", "reduce_cpu_net_us", "{:,.0f}"),
    ("reducing call wall, ms (median)", "reduce_wall_ms", "{:,.1f}"),
    ("controller CPU per broadcast, µs (caller + loop)", "broadcast_cpu_controller_us", "{:,.0f}"),
    ("controller calls per broadcast (Python + C, both threads)", "broadcast_calls", "{:,.0f}"),
    ("  less heartbeats (at the idle rate)", "broadcast_calls_net", "{:,.0f}"),
    ("controller calls per reducing call", "reduce_calls", "{:,.0f}"),
    ("  less heartbeats (at the idle rate)", "reduce_calls_net", "{:,.0f}"),
    ("controller calls per gathering call", "cast_calls", "{:,.0f}"),
    ("  less heartbeats (at the idle rate)", "cast_calls_net", "{:,.0f}"),
    ("controller calls per second idle (heartbeats)", "idle_calls_per_s", "{:,.0f}"),
    ("call + gather wall, ms (median)", "cast_wall_ms", "{:,.1f}"),
    ("bytes sent for a cast to all hosts but one (a slice)", "slice_cast_bytes", "{:,.0f}"),
    ("  calling thread's CPU for it, µs", "slice_cast_caller_cpu_us", "{:,.0f}"),
    ("agents join, s", "join_s", "{:.2f}"),
    ("agent connections the controller holds", "agent_connections", "{:,}"),
    ("spawn_procs, s", "spawn_procs_s", "{:.2f}"),
    ("  controller CPU for it (both threads), s", "spawn_procs_cpu_s", "{:.3f}"),
    ("  frames the controller sent / received for it", "spawn_procs_frame_counts", "{}"),
    ("spawn of the actors + first call, s", "spawn_actors_s", "{:.2f}"),
    ("bytes sent for the actors' spawn", "spawn_bytes", "{:,.0f}"),
    ("dead agent (link closed) detected, s", "detect_dead_leaf_s", "{:.3f}"),
    ("frozen agent (heartbeats) detected, s", "detect_frozen_leaf_s", "{:.2f}"),
    ("dead interior agent detected, s", "detect_dead_interior_s", "{:.3f}"),
    ("controller loop CPU idle (heartbeats), µs/s", "idle_cpu_loop_us_per_s", "{:,.0f}"),
    ("process memory per host, KiB", "memory_per_host_kib", "{:,.0f}"),
    ("stop of the processes (ProcMesh.stop), s", "stop_procs_s", "{:.2f}"),
    ("  controller CPU for it (both threads), s", "stop_procs_cpu_s", "{:.3f}"),
    ("  frames the controller sent / received for it", "stop_procs_frame_counts", "{}"),
    ("shutdown of the hosts, s", "shutdown_hosts_s", "{:.2f}"),
]


_OUT = (
    "CAST",
    "TREECAST",
    "PLANNEDCAST",
    "CASTPLAN",
    "ROUTE",
    "RELAY",
    "CALL",
)  # what carries a cast to the hosts
_BACK = ("REPLIES", "REPLY")  # what carries its replies back


def _cast_traffic(result: dict[str, Any]) -> None:
    """The cast's own frames and bytes, from the tally of its kinds (the heartbeats
    that crossed the links meanwhile are left out)."""
    counted = result["cast_frames"]
    result["frames_sent_per_cast"] = sum(counted["sent"].get(k, 0) for k in _OUT)
    result["frames_received_per_cast"] = sum(counted["received"].get(k, 0) for k in _BACK)
    result["bytes_sent_per_cast"] = sum(counted["sent_bytes"].get(k, 0) for k in _OUT)
    result["bytes_received_per_cast"] = sum(counted["received_bytes"].get(k, 0) for k in _BACK)


def _derive(result: dict[str, Any]) -> None:
    """Figures computed from the measured ones (for the table and the chart)."""
    if "error" in result:
        return
    _cast_traffic(result)
    # The loop thread also answers heartbeats while a cast is out: what it spends idle
    # per second, over the cast's wall time, is not the cast's.
    heartbeats = result["idle_cpu_loop_us_per_s"] * result["cast_wall_ms"] / 1e3
    result["cast_cpu_loop_net_us"] = max(0.0, result["cast_cpu_loop_us"] - heartbeats)
    result["cast_cpu_net_us"] = result["cast_cpu_caller_us"] + result["cast_cpu_loop_net_us"]
    result["cpu_per_host_us"] = result["cast_cpu_net_us"] / result["hosts"]
    for name in ("cast", "reduce", "broadcast"):
        if f"{name}_calls" in result and "idle_calls_per_s" in result:
            beats = result["idle_calls_per_s"] * result[f"{name}_calls_wall_s"]
            result[f"{name}_calls_net"] = max(0.0, result[f"{name}_calls"] - beats)
    if "reduce_cpu_loop_us" in result:  # (results of builds before reduce was measured)
        beats = result["idle_cpu_loop_us_per_s"] * result["reduce_wall_ms"] / 1e3
        loop = max(0.0, result["reduce_cpu_loop_us"] - beats)
        result["reduce_cpu_net_us"] = result["reduce_cpu_caller_us"] + loop
    result["spawn_bytes"] = sum(result["spawn_actors_frames"]["sent_bytes"].values())
    for name in ("spawn_procs", "stop_procs"):  # (heartbeats that crossed meanwhile left out)
        frames = result.get(f"{name}_frames")
        if frames is not None:
            sent, got = (
                sum(n for kind, n in frames[way].items() if kind not in ("PING", "PONG"))
                for way in ("sent", "received")
            )
            result[f"{name}_frame_counts"] = f"{sent:,} / {got:,}"
    result["memory_per_host_kib"] = result["memory_per_host_bytes"] / 1024


def table(results: list[dict[str, Any]]) -> str:
    sizes = [r for r in results]
    head = "| hosts (16 actors each) | " + " | ".join(f"{r['hosts']:,}" for r in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for label, key, form in ROWS:
        cells = [("failed" if "error" in r else _fmt(r.get(key), form)) for r in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(results: list[dict[str, Any]], path: Path, model: dict[str, Any] | None = None) -> bool:
    """Controller cost against hosts (log-log), with the model's tree beside the
    measured one level; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ok = [r for r in results if "error" not in r and r["cast_cpu_net_us"] > 0]
    if not ok:
        return False
    xs = [r["hosts"] for r in ok]
    panels = [
        ("cast_cpu_net_us", "controller CPU per cast (µs)"),
        ("frames_sent_per_cast", "frames the controller sends per cast"),
        ("cast_wall_ms", "call + gather wall (ms, simulated)"),
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(13, 3.8))
    for axis, (key, title) in zip(axes, panels, strict=True):
        axis.plot(xs, [r[key] for r in ok], marker="o", color="tab:red", label="one level")
        if key == "cast_cpu_net_us" and ok:
            base = ok[0][key] / ok[0]["hosts"]
            axis.plot(xs, [base * x for x in xs], linestyle="--", color="gray", label="linear")
            if model is not None:
                k = model["fan_out"]
                tree = [p["controller_tree_us"] / model["costs"]["calibration"] for p in
                        model["predictions"] if p["hosts"] in xs]  # fmt: skip
                axis.plot(xs, tree, linestyle=":", color="tab:blue", label=f"model: tree k={k}")
            axis.legend(fontsize=8)
        if key == "frames_sent_per_cast" and model is not None:
            k = model["fan_out"]
            axis.plot(xs, [min(k, x) for x in xs], linestyle=":", color="tab:blue",
                      label=f"tree k={k}: min(k, hosts)")  # fmt: skip
            axis.legend(fontsize=8)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("hosts (16 actors each)")
        axis.set_title(title, fontsize=10)
    figure.suptitle("bench.simulate: the real controller and host agents, simulated workers")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return True


def _calibration(args: argparse.Namespace) -> dict[str, Any]:
    """Real sockets over in-memory links: the controller's CPU per call in a
    ``bench.scale`` result against a simulation of the same shape (1.0 without one)."""
    path = args.calibrate
    if path is None or not path.exists():
        return {
            "factor": 1.0,
            "source": "none (no bench.scale result): simulated costs as they are",
        }
    scale = json.loads(path.read_text())
    real = scale["agents"]["controller_cpu_per_call_us"]
    shape = argparse.Namespace(
        **{**vars(args), "per_host": scale["per_host"], "actors_per_proc": 1}
    )
    simulated = _run_size(scale["hosts"], shape)
    if "error" in simulated:
        return {"factor": 1.0, "source": f"the calibrating simulation failed: {simulated['error']}"}
    factor = real / simulated["cast_cpu_controller_us"]
    return {
        "factor": factor,
        "source": f"{path.name}: {scale['hosts']} namespace hosts x {scale['per_host']} processes",
        "real_controller_cpu_per_call_us": real,
        "simulated_controller_cpu_per_call_us": simulated["cast_cpu_controller_us"],
    }


def _model(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any] | None:
    calibration = _calibration(args)
    costs = fit(results, calibration["factor"], args.rtt_us, args.worker_us)
    if costs is None:
        return None
    k = args.model_fan_out
    predictions = [
        {
            "hosts": hosts,
            "one_level_ms": one_level_us(costs, hosts) / 1e3,
            "tree_ms": tree_us(costs, hosts, k) / 1e3,
            "tree_linear_ms": tree_us(costs, hosts, k, quadratic=False) / 1e3,
            "controller_one_level_us": costs.controller_us(hosts),
            "controller_tree_us": costs.controller_us(min(k, hosts)),
        }
        for hosts in sorted({*SIZES, *(r["hosts"] for r in results)})
    ]
    return {
        "costs": costs.as_dict(),
        "calibration": calibration,
        "fan_out": k,
        "predictions": predictions,
    }


def model_table(model: dict[str, Any]) -> str:
    costs, k = model["costs"], model["fan_out"]
    lines = [
        f"Model (docs/multihost.md): controller {costs['fixed_us']:,.0f} + "
        f"{costs['per_host_us']:,.1f} x H + {costs['quadratic_us']:.4f} x H^2 µs per cast "
        f"(simulated), agent {costs['agent_us']:,.0f} µs, x {costs['calibration']:.2f} for "
        f"real sockets ({model['calibration']['source']}); round trip {costs['rtt_us']:g} µs, "
        f"endpoint {costs['worker_us']:g} µs",
        "",
        f"| hosts | controller CPU, one level, ms | call + gather, one level, ms | "
        f"controller CPU, tree k={k}, ms | call + gather, tree k={k}, ms |",
        "|---|---|---|---|---|",
    ]
    for p in model["predictions"]:
        lines.append(
            f"| {p['hosts']:,} | {p['controller_one_level_us'] / 1e3:,.2f} | "
            f"{p['one_level_ms']:,.2f} | {p['controller_tree_us'] / 1e3:,.2f} | "
            f"{p['tree_ms']:,.2f} |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--per-host", type=int, default=16, help="processes per host")
    parser.add_argument("--actors-per-proc", type=int, default=1)
    parser.add_argument("--casts", type=int, default=50, help="casts timed (fewer when large)")
    parser.add_argument("--fan-out", type=int, default=None, help="cast tree fan-out, if built")
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=10.0)
    parser.add_argument("--spawn-timeout", type=float, default=1800.0)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds of idle measured")
    parser.add_argument("--size-timeout", type=float, default=3600.0)
    parser.add_argument(
        "--max-shutdown-hosts",
        type=int,
        default=1024,
        help="largest size whose stop and shutdown are timed (larger ones just exit)",
    )
    parser.add_argument(
        "--max-slice-actors",
        type=int,
        default=16_384,
        help="largest slice cast measured (its headers grow with the slice)",
    )
    parser.add_argument(
        "--calibrate",
        type=Path,
        default=BENCH / "results" / "scale.json",
        help="a bench.scale result: its controller CPU per call on real sockets against "
        "a simulation of the same shape calibrates the model (skipped if absent)",
    )
    parser.add_argument("--rtt-us", type=float, default=100.0, help="model: round trip per hop")
    parser.add_argument("--worker-us", type=float, default=50.0, help="model: endpoint time")
    parser.add_argument("--model-fan-out", type=int, default=16, help="model: tree fan-out")
    parser.add_argument(
        "--model-from", type=Path, default=None, help="recompute the model of this result"
    )
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "simulate.json")
    parser.add_argument("--figure", type=Path, default=BENCH / "figures" / "simulate.png")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.one is not None:
        result = run_one(args)
        print(json.dumps(result))
        sys.stdout.flush()
        os._exit(0)  # thousands of simulated hosts need no orderly teardown
    if any(h < 1 for h in args.hosts) or args.per_host < 1 or args.actors_per_proc < 1:
        print("--hosts, --per-host and --actors-per-proc must be positive", file=sys.stderr)
        return 2
    if args.fan_out is not None and args.fan_out < 2:
        print("--fan-out must be at least 2", file=sys.stderr)
        return 2
    if args.model_from is not None:
        # Only the model again (a new calibration, say), from the sizes of an earlier run.
        document = json.loads(args.model_from.read_text())
        for result in document["sizes"]:
            _derive(result)
        document["model"] = _model(args, document["sizes"])
        args.model_from.write_text(json.dumps(document, indent=1))
        chart(document["sizes"], args.figure, document["model"])
        print(table(document["sizes"]))
        if document["model"] is not None:
            print()
            print(model_table(document["model"]))
        return 0
    tree = tree_support()
    if args.fan_out is not None and tree is None:
        print(
            f"--fan-out {args.fan_out}: this build casts one level deep (host_mesh takes no "
            "fan-out); measuring one level",
            file=sys.stderr,
        )
    results: list[dict[str, Any]] = []
    document: dict[str, Any] = {
        "model": None,
        "per_host": args.per_host,
        "actors_per_proc": args.actors_per_proc,
        "fan_out": args.fan_out if tree is not None else None,
        "tree": "none in this build: one level measured"
        if tree is None
        else f"{tree[0]} {tree[1]}",
        "heartbeat": [args.heartbeat_interval, args.heartbeat_timeout],
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sizes": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for hosts in args.hosts:
        result = _run_size(hosts, args)
        _derive(result)
        results.append(result)
        state = result.get("error", f"{result.get('run_s', 0):.0f} s")
        print(f"{hosts} hosts: {state}", file=sys.stderr)
        args.out.write_text(json.dumps(document, indent=1))  # a long run keeps what it has
    model = document["model"] = _model(args, results)
    args.out.write_text(json.dumps(document, indent=1))
    chart(results, args.figure, model)
    print(table(results))
    if model is not None:
        print()
        print(model_table(model))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
