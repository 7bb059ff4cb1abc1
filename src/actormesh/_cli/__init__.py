"""The ``actormesh`` command.

- ``actormesh host --join HOST:PORT`` and ``actormesh worker --join HOST:PORT``: processes
  that join a controller from other hosts (``_join``);
- ``actormesh jobs``: this user's running controllers, then its leased jobs (``_leases``);
- ``actormesh exec JOB script.py`` and ``actormesh kill JOB``: run a script as a leased
  job's controller; end a leased job everywhere (``_leases``);
- ``actormesh top``: a live view of a job's meshes and ranks (``_top``);
- ``actormesh stacks [--mesh M] [--rank R]``: every selected rank's Python stacks,
  grouped where ranks share one (``_stacks``);
- ``actormesh debug``: the ranks stopped at ``breakpoint()``, and a pdb prompt for each
  (``_debug``);
- ``actormesh log [JOB]``: a job's event log, after the run too (``_log``);
- ``actormesh timeline [JOB] -o trace.json``: a running job's calls per rank as a
  Chrome / Perfetto trace (``_timeline``).

Jobs are found through the per-user registry (``actormesh._observe._registry``);
``--job PID`` picks one when several run.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import _join, _leases, _log, _timeline

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actormesh", description="Run, watch and debug actormesh jobs."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _join.add_commands(commands)
    _leases.add_commands(commands)
    jobs = commands.add_parser("jobs", help="list this user's running and leased jobs")
    top = commands.add_parser(
        "top",
        help="live view of a running job",
        description="A live view of a running job's meshes and ranks (q quits, ? helps).",
    )
    stacks = commands.add_parser(
        "stacks",
        help="Python stacks of a job's ranks",
        description="Every selected rank's Python stacks, grouped where ranks share one.",
    )
    debug = commands.add_parser(
        "debug",
        help="attach to ranks stopped at breakpoint()",
        description="List the ranks of a job stopped at breakpoint() and attach to each.",
    )
    for command in (jobs, top, stacks, debug):
        command.add_argument(
            "--job", metavar="PID", help="the job (its pid; default: the only one running)"
        )
    for command in (top, stacks, debug):
        command.add_argument("--mesh", metavar="NAME", help="only the mesh of this name")
    stacks.add_argument(
        "--rank", type=int, action="append", metavar="R", help="only rank R (repeatable)"
    )
    stacks.add_argument(
        "--native",
        action="store_true",
        help="C and Python frames of every thread, and the GIL's holder (py-spy)",
    )
    debug.add_argument("--rank", type=int, metavar="R", help="attach to rank R when it stops")
    top.add_argument(
        "--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes"
    )
    top.add_argument(
        "--services", action="store_true", help="start on the services view (v switches)"
    )
    _log.add_command(commands)
    _timeline.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``actormesh`` command line; returns the exit status."""
    try:
        status = _run(argv)
        sys.stdout.flush()  # here, where a reader that went away is caught
        return status
    except BrokenPipeError:
        # The reader went away (``actormesh jobs | head -1``): end quietly, as Unix tools
        # do; stdout goes nowhere, so flushing it at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("worker", "host"):
        return _join.run(args)
    if args.command == "log":
        return _log.log(args)
    if args.command == "exec":
        return _leases.exec_script(args)
    if args.command == "kill":
        return _leases.kill(args)
    from ._client import JobError

    try:
        if args.command == "jobs":
            from ._stacks import jobs

            status = jobs(args)
            _leases.list_leased(args.job)
            return status
        if args.command == "stacks":
            from ._stacks import stacks

            return stacks(args)
        if args.command == "debug":
            from ._debug import debug

            return debug(args)
        if args.command == "timeline":
            return _timeline.timeline(args)
        if args.command == "top":
            from ._top import top

            return top(args)
    except JobError as error:
        print(f"actormesh {args.command}: {error}", file=sys.stderr)
        return 1
    raise AssertionError(f"unknown command {args.command!r}")  # argparse refuses it first
