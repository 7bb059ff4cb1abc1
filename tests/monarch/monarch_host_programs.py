"""Monarch programs of the worker-loop tests, each run as a process of its own.

``python -m monarch_host_programs NAME ARG`` runs the function ``NAME`` with ``ARG`` (JSON)
and prints its result as one line of JSON. Each is a complete program as a Monarch user
writes it (only ``actormesh.actor`` imported): a controller that attaches to worker loops,
or a process that serves as one and attaches to itself.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from actormesh.actor import attach_to_workers, default_bootstrap_cmd, start_worker_loop_forever

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_host_actors import EnvProbe
else:
    from monarch_host_actors import EnvProbe


def attach(args: dict[str, Any]) -> dict[str, Any]:
    """Attaches to ``args["workers"]`` (with ``args["ca"]``), spawns one process per host
    (with ``args["command_env"]`` as a bootstrap command's ``with_env``, if given), reads
    ``args["read"]`` in each, then shuts the hosts down (``args["leave"]``: exits
    without, leaving the worker loops to the next controller)."""
    hosts = attach_to_workers(ca=args.get("ca"), workers=args["workers"])
    command = None
    if "command_env" in args:
        command = default_bootstrap_cmd().with_env(args["command_env"])
    procs = hosts.spawn_procs(per_host={"gpus": 1}, bootstrap_command=command)
    probes = procs.spawn("probe", EnvProbe)
    result: dict[str, Any] = {
        "ranks": [dict(point) for point, _ in probes.pid.call().get(timeout=60).items()],
        "pids": probes.pid.call().get(timeout=60).values(),
        "env": {
            name: probes.get_env.call(name).get(timeout=60).values()
            for name in args.get("read", [])
        },
    }
    if args.get("plain_spawn"):  # and a spawn without a command, on the same hosts
        plain = hosts.spawn_procs(per_host={"gpus": 1}).spawn("plain", EnvProbe)
        result["plain_env"] = {
            name: plain.get_env.call(name).get(timeout=60).values() for name in args["read"]
        }
    if not args.get("leave"):
        hosts.shutdown().get(timeout=60)
    return result


def attach_error(args: dict[str, Any]) -> dict[str, Any]:
    """Attaches to ``args["workers"]`` and reports the error it fails with."""
    try:
        attach_to_workers(ca=args.get("ca"), workers=args["workers"])
    except Exception as error:
        return {"type": type(error).__name__, "message": str(error)}
    return {"type": None}


def serve_and_attach_self(args: dict[str, Any]) -> dict[str, Any]:
    """Starts a worker loop in the background, drops its future, attaches to it from this
    very process and shuts it down: this process then ends (status 0), never returning."""

    def handler(signum: int, frame: Any) -> None:
        print("SIGTERM_HANDLED", flush=True)

    signal.signal(signal.SIGTERM, handler)
    serving = start_worker_loop_forever(ca="trust_all_connections", address=args["address"])
    del serving
    hosts = attach_to_workers(ca="trust_all_connections", workers=[args["address"]])
    pid = hosts.spawn_procs().spawn("probe", EnvProbe).pid.call_one().get(timeout=60)
    print("SERVED", pid != os.getpid(), flush=True)
    print("HANDLER_KEPT", signal.getsignal(signal.SIGTERM) is handler, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    hosts.shutdown().get(timeout=60)
    print("SHUT_DOWN", flush=True)
    # The worker's end ends this process: a bounded wait for it, never a normal return.
    signal.sigtimedwait([signal.SIGUSR1], 60)
    print("DID_NOT_EXIT", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    name, argument = sys.argv[1:]
    print(json.dumps(globals()[name](json.loads(argument))), flush=True)
