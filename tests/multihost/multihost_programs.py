"""Controller programs the multi-host tests run as their own processes.

``python multihost_programs.py controller LISTEN COUNT [frozen]`` waits for COUNT processes
to join at LISTEN (secret from ``ACTORMESH_SECRET``), spawns an actor in each, prints
``READY`` and the workers' pids as JSON, then sleeps until killed. With ``frozen``, it
first blocks every worker's event loop and checks that they no longer answer.

``python multihost_programs.py hosts LISTEN COUNT`` waits for COUNT host agents instead,
starts two processes on each, prints ``READY`` with their pids, then waits for a line on
stdin: when it comes, it calls the actor on the first host (whose link the test has cut
meanwhile) and prints, as JSON, how that call ended and how long it took.
"""

from __future__ import annotations

import json
import sys
import time

from multihost_actors import Where

from actormesh import CallTimeoutError, host_mesh, proc_mesh
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


if __name__ == "__main__":
    if sys.argv[1] == "controller":
        controller(sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["frozen"])
    elif sys.argv[1] == "hosts":
        hosts(sys.argv[2], int(sys.argv[3]))
