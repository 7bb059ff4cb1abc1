"""``exec_command``: run a command on the hosts of a job, as Monarch's does.

One process per host (or ``per_host`` of them) is started on the host mesh, an actor in
each runs the command there with the process' place in the mesh in its environment
(``MONARCH_RANK_<dim>``, ``MONARCH_SIZE_<dim>``), and the processes are stopped again.
The command starts before ``exec_command`` returns; the returned future only observes it
and gives the largest exit status of all ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future as ConcurrentFuture
from typing import Any

from .._api import Actor, Future, HostMesh, context, endpoint, from_concurrent
from .._hosts import Runtime

__all__ = ["CommandActor", "exec_command", "rank_environment"]


def rank_environment() -> dict[str, str]:
    """The calling actor's place in its mesh, as Monarch's job commands see it."""
    rank = context().actor_instance.rank
    env = {f"MONARCH_RANK_{k}": str(v) for k, v in dict(rank).items()}
    env.update({f"MONARCH_SIZE_{k}": str(v) for k, v in zip(rank.extent.keys(), rank.extent.sizes)})
    return env


class CommandActor(Actor):
    """Runs one command in its process' host and says how it ended."""

    @endpoint
    def run(
        self,
        argv: list[str],
        env: dict[str, str] | None,
        workdir: str | None,
        client_cwd: str,
        output_dir: str | None,
    ) -> dict[str, Any]:
        """Run ``argv`` (a ``.py`` file or ``-m module``: with this Python); its exit
        status, and its output unless it went to ``output_dir``."""
        if argv[0].endswith(".py") or argv[0] == "-m":
            argv = [sys.executable, *argv]
        cwd = workdir or (client_cwd if os.path.isdir(client_cwd) else None)
        child_env = {**os.environ, **rank_environment(), **(env or {})}
        if output_dir is None:
            done = subprocess.run(
                argv, env=child_env, cwd=cwd, capture_output=True, text=True, check=False
            )
            return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        where = self._subdir(output_dir)
        os.makedirs(where, exist_ok=True)
        with (
            open(os.path.join(where, "stdout.txt"), "w") as out,
            open(os.path.join(where, "stderr.txt"), "w") as err,
        ):
            code = subprocess.run(
                argv, env=child_env, cwd=cwd, stdout=out, stderr=err, check=False
            ).returncode
        return {"returncode": code, "stdout": "", "stderr": ""}

    @staticmethod
    def _subdir(output_dir: str) -> str:
        """``output_dir`` with ``$SUBDIR`` replaced by this rank's coordinates."""
        rank = dict(context().actor_instance.rank)
        return output_dir.replace("$SUBDIR", "_".join(f"{k}_{v}" for k, v in rank.items()))


def exec_command(
    host_mesh: HostMesh,
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    output_dir: str | None = None,
    rank: int | None = None,
    point: Mapping[str, int] | None = None,
    per_host: Mapping[str, int] | None = None,
) -> Future[int]:
    """Run ``cmd`` on ``host_mesh`` (every host, or the host at ``rank`` of the flattened
    mesh, or at ``point``); a future of the largest exit status (0: all succeeded).

    Output comes back and is printed here, unless ``output_dir`` names a directory on
    each host (``$SUBDIR`` in it: the rank's coordinates) for ``stdout.txt`` and
    ``stderr.txt``. The command is started before this returns; dropping the future does
    not cancel it.

    Raises:
        ValueError: both ``rank`` and ``point`` given, or an empty ``cmd``.
    """
    if isinstance(cmd, str) or not cmd:
        raise ValueError(f"cmd is a non-empty list of arguments, not {cmd!r}")
    if rank is not None and point is not None:
        raise ValueError("exec_command takes rank or point, not both")
    if point is not None:
        target = host_mesh.slice(**point)
    elif rank is not None:
        target = host_mesh.flatten("rank").slice(rank=rank)
    else:
        target = host_mesh
    procs = target.spawn_procs(per_host=dict(per_host) if per_host else None)
    actors = procs.spawn("exec_command", CommandActor)
    calls = actors.run.call(list(cmd), dict(env) if env else None, workdir, os.getcwd(), output_dir)
    finished: ConcurrentFuture[int] = ConcurrentFuture()

    def observe() -> None:
        try:
            results = calls.get()
            for _, result in results.items():
                if output_dir is None:
                    print(result["stdout"], end="")
                    print(result["stderr"], end="", file=sys.stderr)
            finished.set_result(max(r["returncode"] for _, r in results.items()))
        except BaseException as error:  # every outcome must settle the future
            finished.set_exception(error)
        finally:
            procs.stop().get()

    # Not a daemon: the interpreter waits for a started command, as Monarch's does.
    threading.Thread(target=observe, name="actormesh-exec-command").start()
    return from_concurrent(Runtime.get(), finished)
