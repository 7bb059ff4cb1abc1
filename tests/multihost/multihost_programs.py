"""Controller programs the multi-host tests run as their own processes.

``python multihost_programs.py controller LISTEN COUNT`` waits for COUNT processes to join
at LISTEN (secret from ``ACTORMESH_SECRET``), spawns an actor in each, prints ``READY``
and the workers' pids as JSON, then sleeps until killed.
"""

from __future__ import annotations

import json
import sys
import time

from multihost_actors import Where

from actormesh import proc_mesh
from actormesh.allocators import ExternalAllocator


def controller(listen: str, count: int) -> None:
    procs = proc_mesh(count, allocator=ExternalAllocator(listen, timeout=60)).get(timeout=90)
    where = procs.spawn("where", Where).get(timeout=30)
    pids = [value["pid"] for value in where.where.call().get(timeout=30).values()]
    print("READY", json.dumps(pids), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    if sys.argv[1] == "controller":
        controller(sys.argv[2], int(sys.argv[3]))
