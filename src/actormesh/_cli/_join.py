"""``actormesh host`` and ``actormesh worker``: processes that join a controller.

- ``actormesh host --join HOST:PORT``: this host's agent. A cluster launcher runs one per
  node (``srun --ntasks-per-node=1 actormesh host --join head:29600``); the controller's
  ``host_mesh(hosts=N, allocator=ExternalAllocator(listen=...))`` waits for them, and
  ``spawn_procs`` then asks each for its processes.
- ``actormesh worker --join HOST:PORT``: one worker process (``srun actormesh worker
  --join head:29600``, ``torchrun ... -m actormesh._cli worker --join ...``); the
  controller's ``proc_mesh(..., allocator=ExternalAllocator(listen=...))`` waits for the
  processes and gives them their ranks.

The job's secret comes from ``ACTORMESH_SECRET`` or ``--secret-file``; without it no
connection is made. Both keep trying to reach the controller for ``--wait`` seconds (it
may start first), then serve until the controller lets them go or goes away.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from .._config import Config
from .._transport import AuthenticationError, connect_tcp, format_tcp, parse_tcp

__all__ = ["add_commands", "run"]

_RETRY_INTERVAL = 0.5


def add_commands(commands: Any) -> None:
    """Add ``worker`` and ``host`` to the ``actormesh`` command's subcommands."""
    worker = commands.add_parser(
        "worker",
        help="run a worker process that joins a controller",
        description="Join the controller listening at HOST:PORT and serve its actors.",
    )
    host = commands.add_parser(
        "host",
        help="run this host's agent, which joins a controller",
        description="Join the controller listening at HOST:PORT as this host's agent.",
    )
    for command in (worker, host):
        command.add_argument("--join", required=True, metavar="HOST:PORT", help="the controller")
        command.add_argument(
            "--secret-file",
            type=Path,
            help="file holding the job's secret (default: the ACTORMESH_SECRET variable)",
        )
        command.add_argument(
            "--wait",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="how long to keep trying to reach the controller (default: 60)",
        )
    worker.add_argument(
        "--rank",
        type=int,
        default=_int_env("RANK", "SLURM_PROCID"),
        help="rank to ask for (default: $RANK or $SLURM_PROCID; else ranks go host by host)",
    )
    worker.add_argument(
        "--local-rank",
        type=int,
        default=_int_env("LOCAL_RANK", "SLURM_LOCALID"),
        help="index of this process on its host (default: $LOCAL_RANK or $SLURM_LOCALID)",
    )
    worker.add_argument(
        "--listen-host",
        help="interface to accept peers on (default: the one that reaches the controller)",
    )


def _int_env(*names: str) -> int | None:
    # The launcher's own variables (torchrun, SLURM), not actormesh settings.
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _reach(host: str, port: int, secret: str, wait: float) -> None:
    """Wait until the controller accepts us (the secret checked), or fail clearly."""
    deadline = time.monotonic() + wait
    while True:
        try:
            connect_tcp(host, port, secret=secret, timeout=max(1.0, min(10.0, wait))).close()
            return
        except AuthenticationError:
            raise
        except OSError as error:
            if time.monotonic() >= deadline:
                raise OSError(f"no controller at {host}:{port} after {wait:g} s: {error}") from None
        time.sleep(_RETRY_INTERVAL)


def _reach_controller(args: argparse.Namespace) -> tuple[str, int] | int:
    """``(host, port)`` of the controller once it accepted our secret, or an exit status."""
    # Flags become settings the way every setting arrives: through Config's variables.
    if args.secret_file is not None:
        os.environ["ACTORMESH_SECRET"] = args.secret_file.read_text().strip()
    if getattr(args, "listen_host", None):
        os.environ["ACTORMESH_LISTEN_HOST"] = args.listen_host
    config = Config.from_env()
    if not config.secret:
        print(
            f"actormesh {args.command}: no secret; set ACTORMESH_SECRET or pass --secret-file",
            file=sys.stderr,
        )
        return 2
    try:
        host, port = parse_tcp(args.join)
        _reach(host, port, config.secret, args.wait)
    except (ValueError, OSError) as error:
        print(f"actormesh {args.command}: cannot join {args.join}: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError | AuthenticationError) else 1
    return host, port


def _host(args: argparse.Namespace) -> int:
    reached = _reach_controller(args)
    if isinstance(reached, int):
        return reached
    from .._hosts import serve_agent

    key = f"agent-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    serve_agent(key, format_tcp(*reached), own_group=False)
    return 0


def _worker(args: argparse.Namespace) -> int:
    reached = _reach_controller(args)
    if isinstance(reached, int):
        return reached
    host, port = reached
    hostname = socket.gethostname()
    key = f"join-{hostname}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    info = {"host": hostname, "rank": args.rank, "local_rank": args.local_rank}
    from .._bootstrap import serve
    from .._exceptions import ActorDiedError

    try:
        serve(key, format_tcp(host, port), info, own_group=False)
    except ActorDiedError as error:  # the controller went away between probe and join
        print(f"actormesh worker: cannot join {args.join}: {error}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``actormesh worker`` or ``actormesh host``; returns the exit status."""
    return _worker(args) if args.command == "worker" else _host(args)
