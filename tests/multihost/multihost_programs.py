"""Controller programs the multi-host tests run as their own processes.

``python multihost_programs.py controller LISTEN COUNT [frozen]`` waits for COUNT processes
to join at LISTEN (secret from ``ACTORMESH_SECRET``), spawns an actor in each, prints
``READY`` and the workers' pids as JSON, then sleeps until killed. With ``frozen``, it
first blocks every worker's event loop and checks that they no longer answer.

``python multihost_programs.py hosts LISTEN COUNT`` waits for COUNT host agents instead,
starts two processes on each, prints ``READY`` with their pids, then waits for a line on
stdin: when it comes, it calls the actor on the first host (whose link the test has cut
meanwhile) and prints, as JSON, how that call ended and how long it took.

``python multihost_programs.py stream LISTEN COUNT`` (a tree of agents: the fan-out comes
from ``ACTORMESH_FAN_OUT``) waits for COUNT host agents, starts one process on each,
prints ``READY``, then, on a line ``go VICTIM`` from stdin, keeps four gathering calls
on every host in flight, prints ``STREAMING`` after the first answers (the test kills
or cuts host VICTIM's agent then), goes on until ten calls after the first failure (or
60 s), and prints, as JSON, every call's outcome, whether the hosts other than VICTIM
answer the next cast, and which agents the controller then holds a connection to.

``python multihost_programs.py leased_tree LISTEN COUNT NAME`` makes a leased job of
COUNT host agents as a tree (``ACTORMESH_FAN_OUT``), prints as JSON how many of its
agents the controller probes itself, and shuts the job down.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from typing import Any

from multihost_actors import Where

from actormesh import CallTimeoutError, host_mesh, proc_mesh, set_failure_hook
from actormesh.allocators import ExternalAllocator


def controller(listen: str, count: int, frozen: bool) -> None:
    procs = proc_mesh(count, allocator=ExternalAllocator(listen, timeout=60)).get(timeout=90)
    where = procs.spawn("where", Where)
    pids = [value["pid"] for value in where.where.call().get(timeout=30).values()]
    if frozen:
        where.freeze_loop.broadcast(300)
        try:
            where.where.call().get(timeout=2)
        except CallTimeoutError:
            pass  # stuck, as wanted: only a thread of theirs can notice we are gone
        else:
            print("NOT FROZEN", flush=True)
            return
    print("READY", json.dumps(pids), flush=True)
    time.sleep(600)


def hosts(listen: str, count: int) -> None:
    hosts = host_mesh(count, allocator=ExternalAllocator(listen, timeout=60)).get(timeout=90)
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    where = procs.spawn("where", Where)
    pids = [value["pid"] for value in where.where.call().get(timeout=30).values()]
    print("READY", json.dumps(pids), flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    try:
        where.slice(hosts=0, gpus=0).block.call_one().get(timeout=60)
        outcome = {"error": None}
    except Exception as error:
        outcome = {"error": type(error).__name__, "message": str(error)}
    outcome["seconds"] = time.monotonic() - started
    print(json.dumps(outcome), flush=True)
    time.sleep(600)


def stream(listen: str, count: int) -> None:
    failures: list[Any] = []
    set_failure_hook(failures.append)  # the victim's ranks fail; the mesh stays usable
    hosts = host_mesh(count, allocator=ExternalAllocator(listen, timeout=60)).get(timeout=90)
    where = hosts.spawn_procs(per_host={"gpus": 1}).spawn("where", Where)
    where.where.call().get(timeout=30)
    print("READY", flush=True)
    victim = int(sys.stdin.readline().split()[1])
    outcomes: list[dict[str, Any]] = []
    in_flight: deque[Any] = deque(where.rank_plus.call(i) for i in range(4))
    deadline = time.monotonic() + 60
    failed_at: int | None = None
    sent = 4
    while in_flight and time.monotonic() < deadline:
        try:
            in_flight.popleft().get(timeout=60)
            outcomes.append({"ok": True})
        except Exception as error:
            outcomes.append({"ok": False, "error": type(error).__name__, "message": str(error)})
            failed_at = len(outcomes) if failed_at is None else failed_at
        if len(outcomes) == 4:
            print("STREAMING", flush=True)
        if failed_at is None or len(outcomes) < failed_at + 10:
            in_flight.append(where.rank_plus.call(sent))
            sent += 1
    others = [h for h in range(count) if h != victim]
    try:
        found = [where.slice(hosts=h).where.call_one().get(timeout=30) for h in others]
        survivors = {"ok": [int(value["env_rank"]) for value in found] == others}
    except Exception as error:
        survivors = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    try:
        cast = where.slice(hosts=slice(victim + 1, count)).where.call().get(timeout=30)
        ranks = [int(value["env_rank"]) for value in cast.values()]
        survivors["cast"] = ranks == list(range(victim + 1, count))
    except Exception as error:
        survivors["cast"] = f"{type(error).__name__}: {error}"
    report = {"outcomes": outcomes, "next": survivors, "joined": _joined_directly()}
    print(json.dumps(report), flush=True)
    time.sleep(600)


def _joined_directly() -> list[int]:
    """The positions of the live agents of the tree this controller holds a connection of
    its own to (the others reach it through the agent above them)."""
    from actormesh._hosts import Runtime
    from actormesh._hosts._routed import as_routed

    links = Runtime.get().agents.values()
    return sorted(
        link.tree.position(link)
        for link in links
        if link.tree is not None and link.lost_reason is None and as_routed(link.conn) is None
    )


def leased_tree(listen: str, count: int, name: str) -> None:
    from actormesh._hosts import Runtime

    allocator = ExternalAllocator(listen, timeout=60)
    hosts = host_mesh(count, allocator=allocator, keep_alive=60, name=name).get(timeout=90)
    runtime = Runtime.get()
    monitor = runtime.children.heartbeat
    links = [link for link in runtime.agents.values() if link.tree is not None]
    watched = monitor._watched if monitor is not None else {}
    probed = [link for link in links if link.leased and link.process.listen_path in watched]
    print(json.dumps({"links": len(links), "probed": len(probed)}), flush=True)
    hosts.shutdown().get(timeout=60)


if __name__ == "__main__":
    if sys.argv[1] == "controller":
        controller(sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["frozen"])
    elif sys.argv[1] == "hosts":
        hosts(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "stream":
        stream(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "leased_tree":
        leased_tree(sys.argv[2], int(sys.argv[3]), sys.argv[4])
