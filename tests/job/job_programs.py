"""Controllers of the job tests, each run as a process of its own (as a user re-runs a
script): ``python -m job_programs PHASE ARGS_JSON`` prints one line of JSON.

- ``process`` / ``slurm``: build the job from ``args``, ``state(cached_path=...)``,
  spawn one process per host and an actor in each, and report what the actors say of
  where they run (their worker loop's pid, their host's IP) with the timings.
- ``kill``: load the cached job and kill it.
- ``leased``: like ``controller`` for the job's first mesh, after leasing its hosts
  (``HostMesh.lease``); counters count, then the controller SIGKILLs itself.
- ``reattach``: a re-run after that: ``state()`` gives the leased job's hosts, ``attach``
  its counters with their counts; a second controller and a wrong secret are refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

import actormesh
from actormesh.actor import Actor, current_rank, endpoint
from actormesh.job import JobTrait, ProcessJob, SlurmJob, hosts_from_config, job_load

START = time.monotonic()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as file:
        return int(file.read().rsplit(")", 1)[1].split()[1])


def _addresses() -> list[str]:
    """This host's IPv4 addresses, loopback left out (no name is resolved)."""
    found = []
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # no IPv4 address on it
            address = socket.inet_ntoa(answer[20:24])
            if not address.startswith("127."):
                found.append(address)
    finally:
        probe.close()
    return sorted(found)


class Where(Actor):
    """Says where it runs: its rank, its host's worker loop, its host's address."""

    @endpoint
    def where(self) -> dict[str, Any]:
        agent = os.getppid()  # a worker is its host agent's child; the agent, the loop's
        return {
            "rank": dict(current_rank()),
            "loop": _parent(agent),
            "ips": _addresses(),
            "netns": os.readlink("/proc/self/ns/net"),
        }


class Counter(Actor):
    """State that must survive its controller: a count per rank."""

    def __init__(self) -> None:
        self.count = 0

    @endpoint
    def add(self, amount: int) -> int:
        self.count += amount
        return self.count

    @endpoint
    def where(self) -> dict[str, int]:
        """Its pid, its host agent's (the worker loop's session) and its worker loop's."""
        return {"pid": os.getpid(), "agent": os.getppid(), "loop": _parent(os.getppid())}


def _job(args: dict[str, Any]) -> JobTrait:
    if args["kind"] == "slurm":
        return SlurmJob(
            args["meshes"],
            python_exe=sys.executable,
            monarch_port=args["port"],
            log_dir=args["log_dir"],
            exclusive=False,
        )
    return ProcessJob(args["meshes"])


def controller(args: dict[str, Any]) -> dict[str, Any]:
    job = _job(args)
    state = job.state(cached_path=args["cache"])
    attached = time.monotonic()
    result: dict[str, Any] = {"apply_id": job.apply_id, "meshes": {}}
    for name in args["meshes"]:
        procs = getattr(state, name).spawn_procs()
        result["meshes"][name] = list(procs.spawn("where", Where).where.call().get().values())
    result["first_answer_s"] = time.monotonic() - START
    result["attach_s"] = attached - START
    result["slurm_job_id"] = getattr(job_load(args["cache"]), "slurm_job_id", None)
    return result


def leased(args: dict[str, Any]) -> dict[str, Any]:
    job = _job(args)
    hosts = getattr(job.state(cached_path=args["cache"]), next(iter(args["meshes"])))
    hosts.lease(args["lease"], keep_alive=args["keep_alive"]).get()
    counters = hosts.spawn_procs(name="counters").spawn("counter", Counter)
    for step in range(3):
        counts = counters.add.call(step + 1).get()  # a "training loop" of three steps
    print(json.dumps({"counts": sorted(counts.values())}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the controller dies, mid-job
    raise AssertionError("not reached")


def reattach(args: dict[str, Any]) -> dict[str, Any]:
    job = _job(args)
    hosts = getattr(job.state(cached_path=args["cache"]), next(iter(args["meshes"])))
    attached_s = time.monotonic() - START
    leased = actormesh.attach(args["lease"])
    counters = leased["counter"]
    counts = sorted(counters.add.call(0).get().values())
    second = subprocess.run(
        [sys.executable, "-c", f"import actormesh; actormesh.attach({args['lease']!r})"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wrong = subprocess.run(
        [sys.executable, "-c", f"import actormesh; actormesh.attach({args['lease']!r}, "
         "secret='not-the-secret')"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "ACTORMESH_SECRET"},
    )  # fmt: skip
    return {
        "counts": counts,
        "same_hosts": hosts is leased.hosts,
        "where": list(counters.where.call().get().values()),
        "attach_s": attached_s,
        "first_answer_s": time.monotonic() - START,
        "second": second.stderr.strip().splitlines()[-1:],
        "wrong_secret": wrong.stderr.strip().splitlines()[-1:],
    }


def from_config(args: dict[str, Any]) -> dict[str, Any]:
    """Monarch's hosts_from_config: call its hosts, then exit without shutting down."""
    hosts = hosts_from_config("workers")
    where = hosts.spawn_procs().spawn("where", Where).where.call().get().values()
    return {"loops": [w["loop"] for w in where], "extent": dict(hosts.extent)}


def kill(args: dict[str, Any]) -> dict[str, Any]:
    job = job_load(args["cache"])
    job.kill()
    return {"active": job.active}


if __name__ == "__main__":
    phase, argument = sys.argv[1:]
    programs = {
        "controller": controller,
        "from_config": from_config,
        "kill": kill,
        "leased": leased,
        "reattach": reattach,
    }
    print(json.dumps(programs[phase](json.loads(argument))), flush=True)
