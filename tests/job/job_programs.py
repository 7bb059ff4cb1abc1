"""Controllers of the job tests, each run as a process of its own (as a user re-runs a
script): ``python -m job_programs PHASE ARGS_JSON`` prints one line of JSON.

- ``process`` / ``slurm``: build the job from ``args``, ``state(cached_path=...)``,
  spawn one process per host and an actor in each, and report what the actors say of
  where they run (their worker loop's pid, their host's IP) with the timings.
- ``kill``: load the cached job and kill it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import sys
import time
from typing import Any

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
    programs = {"controller": controller, "from_config": from_config, "kill": kill}
    print(json.dumps(programs[phase](json.loads(argument))), flush=True)
