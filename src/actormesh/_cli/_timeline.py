"""``actormesh timeline``: a running job's calls per rank, as a Chrome / Perfetto trace.

The job answers with the trace (``actormesh._observe._timeline``); the command writes it
to ``-o FILE`` (``timeline-<pid>.json`` by default) and says how to open it.
"""

from __future__ import annotations

import argparse
from typing import Any

from .._observe import write_trace
from ._client import JobClient, find_job

__all__ = ["add_command", "timeline"]


def add_command(commands: Any) -> None:
    """Add ``actormesh timeline`` to the command's subparsers."""
    command = commands.add_parser(
        "timeline",
        help="a job's calls per rank as a Chrome/Perfetto trace",
        description=(
            "Write the calls each rank of a running job ran (endpoint, run time, queue "
            "wait, bytes) as a trace for https://ui.perfetto.dev or chrome://tracing."
        ),
    )
    command.add_argument("job", nargs="?", metavar="JOB", help="the job's pid (or use --job)")
    command.add_argument("--job", dest="job_option", metavar="PID", help="the job (its pid)")
    command.add_argument("--mesh", metavar="NAME", help="only the mesh of this name")
    command.add_argument(
        "-o", "--output", metavar="FILE", help="where to write it (default: timeline-<pid>.json)"
    )
    command.add_argument(
        "--last", type=float, metavar="S", help="only calls that ended in the last S seconds"
    )


def timeline(args: argparse.Namespace) -> int:
    """Ask the job for its trace and write it."""
    if args.last is not None and args.last <= 0:
        print("actormesh timeline: --last must be positive seconds")
        return 2
    job = find_job(args.job or args.job_option)
    with JobClient(job, timeout=30.0) as client:
        answer = client.request("timeline", mesh=args.mesh, last=args.last, timeout=5.0)
    trace = answer["trace"]
    path = args.output or f"timeline-{job.pid}.json"
    write_trace(trace, path)
    calls = sum(1 for event in trace["traceEvents"] if event.get("ph") == "X")
    processes = sum(1 for event in trace["traceEvents"] if event.get("name") == "process_name")
    print(f"wrote {calls} calls of {processes} processes to {path}")
    missing = trace["otherData"].get("missing") or {}
    for where, why in missing.items():
        print(f"  not included: {where}: {why}")
    print("open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing")
    return 0
