"""``actormesh jobs`` and ``actormesh stacks``: one-shot questions to running jobs."""

from __future__ import annotations

import argparse
import time

from .._observe import Stacks, find_jobs
from ._client import JobClient, JobError, find_job

__all__ = ["jobs", "stacks"]


def jobs(args: argparse.Namespace) -> int:
    """Print this user's running jobs, one a line."""
    found = find_jobs()
    if args.job:
        found = [job for job in found if args.job in (str(job.pid), job.address)]
    if not found:
        print("no running actormesh job of this user")
        return 0
    print(f"{'PID':>8}  {'UP':>8}  MESHES  PROGRAM")
    for job in found:
        try:
            with JobClient(job, timeout=5.0) as client:
                info = client.request("info")["job"]
        except JobError as error:
            print(f"{job.pid:>8}  {'?':>8}  {'?':>6}  ({error})")
            continue
        up = _duration(time.time() - float(info["started"]))
        print(f"{job.pid:>8}  {up:>8}  {info['meshes']:>6}  {info['program']}")
    return 0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def stacks(args: argparse.Namespace) -> int:
    """Print the stacks of the selected ranks of a job, grouped."""
    job = find_job(args.job)
    with JobClient(job, timeout=30.0 if args.native else 15.0) as client:
        answer = client.request(
            "stacks", mesh=args.mesh, ranks=args.rank, timeout=5.0, native=args.native
        )
    found = [Stacks.from_json(data) for data in answer["stacks"]]
    if not found:
        which = f"named {args.mesh!r} " if args.mesh else ""
        print(f"job {job.pid} has no running mesh {which}(yet)")
        return 1 if args.mesh else 0
    print("\n\n".join(str(stacks) for stacks in found))
    return 0
