"""Controller programs of the lease tests, each run as its own process.

``python lease_programs.py start JOB KEEP_ALIVE LISTEN HOSTS`` waits for HOSTS host agents
at LISTEN, makes them the leased job JOB (``keep_alive`` KEEP_ALIVE seconds) with the
process mesh ``trainers`` (two per host) and the actor mesh ``counters``, prints
``READY`` with the wall-clock time the first call was answered and the workers' pids
(JSON), then calls ``counters.incr`` in a loop, printing ``STEP n`` after each, until it
is killed; a call that fails (another controller took the job over) prints ``LOST`` and
the error, and the program then waits to be killed.

``python lease_programs.py attach JOB [take_over]`` attaches to JOB and prints, as JSON,
the job's mesh names, the counters' values, the wall-clock time the first call was
answered, the workers' pids, and the failures delivered on attaching; then, if there
were none, increments the counters once more and prints their values; and exits
(detaching).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from lease_actors import Counter

import actormesh
from actormesh.allocators import ExternalAllocator


def start(job: str, keep_alive: float, listen: str, count: int) -> None:
    allocator = ExternalAllocator(listen, timeout=90)
    hosts = actormesh.host_mesh(count, allocator=allocator, name=job, keep_alive=keep_alive)
    procs = hosts.get(timeout=120).spawn_procs(per_host={"gpus": 2}, name="trainers")
    counters = procs.spawn("counters", Counter)
    pids = counters.pid.call().get(timeout=60).values()
    print("READY", json.dumps({"answered": time.time(), "pids": pids}), flush=True)
    while True:
        try:
            step = counters.incr.call().get(timeout=60).values()[0]
        except Exception as error:  # taken over: this process runs on, without the job
            print("LOST", type(error).__name__, error, flush=True)
            threading.Event().wait()
        print("STEP", step, flush=True)


def attach(job: str, take_over: bool) -> None:
    attached = actormesh.attach(job, take_over=take_over)
    counters = attached.actor_meshes["counters"]
    dead = {rank for failure in attached.failures for rank in failure.ranks}
    if dead:  # (calls to the failed ranks would raise SupervisionError): the first host
        # none of whose ranks failed
        host = next(h for h in range(counters.size("hosts")) if not {2 * h, 2 * h + 1} & dead)
        counters = counters.slice(hosts=host)
    values = counters.value.call().get(timeout=60).values()
    answered = time.time()
    report = {
        "answered": answered,
        "names": sorted(attached.names()),
        "values": values,
        "pids": counters.pid.call().get(timeout=60).values(),
        "failures": [[f.mesh, list(f.ranks), f.kind] for f in attached.failures],
    }
    print(json.dumps(report), flush=True)
    if not attached.failures:
        print(json.dumps({"after": counters.incr.call().get(timeout=60).values()}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "start":
        start(sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "attach":
        attach(sys.argv[2], sys.argv[3:] == ["take_over"])
