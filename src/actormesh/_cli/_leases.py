"""``actormesh jobs`` (leased jobs), ``actormesh exec`` and ``actormesh kill``.

Leased jobs (``host_mesh(..., name=..., keep_alive=...)``, docs/leases.md) are found by
their records (``actormesh._api._job_records``); what each runs is asked of its agents
over their control line (``actormesh._hosts._lease_line``), with the job's secret.

- ``actormesh jobs`` lists them after the running controllers: attached or detached,
  the lease left, the hosts that answer, the meshes;
- ``actormesh exec JOB script.py [ARGS]`` attaches to JOB and runs the script in the
  same process as the job's controller (``actormesh.attach()`` in the script, with no
  name, returns the job);
- ``actormesh kill JOB`` ends the job on every host and forgets its record.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Any

from .._api import job_records
from .._hosts import ask

__all__ = ["add_commands", "exec_script", "kill", "list_leased"]

# Seconds to wait for each agent's answer when listing or killing.
_ASK_TIMEOUT = 3.0


def add_commands(commands: Any) -> None:
    """Add ``exec`` and ``kill`` to the ``actormesh`` command's subcommands."""
    run = commands.add_parser(
        "exec",
        help="run a script as a leased job's controller",
        description="Attach to the leased job JOB and run SCRIPT as its controller.",
    )
    run.add_argument("job", metavar="JOB", help="the job's name")
    run.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    run.add_argument(
        "--take-over",
        action="store_true",
        help="detach the job's current controller, if any (otherwise refused)",
    )
    end = commands.add_parser(
        "kill",
        help="end a leased job on every host",
        description="End the leased job JOB: its actors, processes and host agents.",
    )
    end.add_argument("job", metavar="JOB", help="the job's name")


def _ask_all(record: job_records.JobRecord, op: str) -> list[dict[str, Any] | str]:
    """Each agent's answer to ``op``, or why it gave none."""
    answers: list[dict[str, Any] | str] = []
    for address in record.agents:
        try:
            sock, answer = ask(address, record.secret, {"op": op}, _ASK_TIMEOUT)
            sock.close()
            answers.append(answer)
        except (OSError, ValueError) as error:
            answers.append(f"{address}: {error}")
    return answers


def list_leased(name: str | None) -> int:
    """Print this user's leased jobs (``name``: only that one); how many."""
    found = [r for r in job_records.records() if name in (None, r.name)]
    if not found:
        return 0
    print(f"\n{'JOB':<20} {'STATE':<28} {'LEASE LEFT':>10}  {'HOSTS':>5}  MESHES")
    for record in found:
        answers = _ask_all(record, "status")
        statuses = [a for a in answers if isinstance(a, dict)]
        hosts = f"{len(statuses)}/{len(answers)}"
        if not statuses:
            print(f"{record.name:<20} {'gone':<28} {'-':>10}  {hosts:>5}  -")
            continue
        attached = [s for s in statuses if s.get("attached")]
        if attached:
            controller = attached[0].get("controller") or {}
            state = f"attached (pid {controller.get('pid', '?')})"
            left = "-"
        else:
            state = "detached"
            left = f"{min(float(s.get('lease_left') or 0) for s in statuses):.0f} s"
        meshes = sorted(
            {m.split("/", 1)[1] for s in statuses for m in s.get("meshes", []) if "/" in m}
        )
        print(f"{record.name:<20} {state:<28} {left:>10}  {hosts:>5}  {', '.join(meshes)}")
    return len(found)


def exec_script(args: argparse.Namespace) -> int:
    """Attach to ``args.job`` and run ``args.script`` as ``__main__`` in this process."""
    from .. import attach

    try:
        attach(args.job, take_over=args.take_over)
    except (LookupError, ValueError, RuntimeError, OSError) as error:
        print(f"actormesh exec: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    os.environ["ACTORMESH_JOB"] = args.job
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def kill(args: argparse.Namespace) -> int:
    """End ``args.job`` on every host that answers, and forget its record."""
    try:
        record = job_records.load(args.job)
    except (LookupError, ValueError) as error:
        print(f"actormesh kill: {error}", file=sys.stderr)
        return 1
    answers = _ask_all(record, "kill")
    ended = sum(isinstance(a, dict) for a in answers)
    job_records.remove(record.name)
    gone = [a for a in answers if isinstance(a, str)]
    note = f"; {len(gone)} had ended already ({'; '.join(gone)})" if gone else ""
    print(f"job {record.name!r}: ended on {ended} of {len(answers)} hosts{note}")
    return 0
