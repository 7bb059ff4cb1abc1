"""``ProcessJob``: each host of the job is a worker loop in a process of this machine."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import NamedTuple

from .._api import HostMesh, attach_to_workers
from ._identity import allocate_service_proc_ids, service_proc_addr
from ._sessions import end_sessions, live_in_sessions
from ._trait import JobState, JobTrait

__all__ = [
    "OWNER_VARIABLES",
    "ProcessJob",
    "ProcessState",
    "TRUST_ALL_CONNECTIONS",
    "check_meshes",
    "hosts_from_config",
    "worker_environment",
    "worker_loop_code",
]

log = logging.getLogger("actormesh.job")

# Seconds the hosts get to exit on SIGTERM in kill() before SIGKILL.
_KILL_GRACE = 2.0

# Who a process of actormesh belongs to: a host of a job belongs to nobody (it outlives
# the controller that started it), so none of these may leak into its environment.
OWNER_VARIABLES = (
    "ACTORMESH_ADDRESS",
    "ACTORMESH_COORDS",
    "ACTORMESH_KEY",
    "ACTORMESH_PARENT",
    "ACTORMESH_PARENT_PID",
    "ACTORMESH_PROC_MESH",
    "ACTORMESH_TCP_FD",
)


# Monarch's ca= for worker loops that take their first owner unauthenticated unless they
# have the job's secret (see run_worker_loop_forever).
TRUST_ALL_CONNECTIONS = "trust_all_connections"


class ProcessState(NamedTuple):
    """A host of the job: its worker loop's pid and the address it waits at."""

    pid: int
    channel: str


def check_meshes(meshes: Mapping[str, int]) -> dict[str, int]:
    """``meshes`` (name to number of hosts), checked.

    Raises:
        TypeError: not a mapping of names to ints.
        ValueError: a count below 1.
    """
    if not isinstance(meshes, Mapping):
        raise TypeError(f"meshes maps mesh names to numbers of hosts, not {meshes!r}")
    for name, count in meshes.items():
        if not isinstance(name, str) or isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"meshes maps mesh names to numbers of hosts, not {meshes!r}")
        if count < 1:
            raise ValueError(f"mesh {name!r} needs at least one host, not {count}")
    return dict(meshes)


def worker_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process' environment for a job's worker loop, without what says who owns
    this process, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in OWNER_VARIABLES}
    env.update(extra or {})
    return env


def worker_loop_code(address: str) -> str:
    """The ``python -c`` program of a worker loop at ``address``."""
    return (
        "from actormesh.actor import run_worker_loop_forever; "
        f"run_worker_loop_forever(address={address!r}, ca={TRUST_ALL_CONNECTIONS!r})"
    )


class ProcessJob(JobTrait):
    """A job whose hosts are worker loops in processes of this machine, each waiting at a
    Unix socket, to try a multi-host program on one machine.

    The processes outlive the controller that started them (each in its own session),
    so a re-run that finds the job in the cache re-attaches to the same processes.
    ``kill()`` ends them and everything they started.

    Args:
        meshes: mesh name to number of hosts, e.g. ``{"trainers": 2, "dataloaders": 1}``.
        env: variables added to the worker loops' environment.
    """

    def __init__(self, meshes: Mapping[str, int], env: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._meshes = check_meshes(meshes)
        self._env = dict(env) if env is not None else None
        self._host_to_pid: dict[str, ProcessState] = {}
        self._tmpdir: str | None = None

    def _create(self, client_script: str | None) -> None:
        self._tmpdir = tempfile.mkdtemp(prefix="actormesh-process-job-")
        try:
            for mesh, count in self._meshes.items():
                ids = allocate_service_proc_ids(count)
                for i in range(count):
                    key = f"{mesh}_{i}"
                    address = service_proc_addr(f"ipc://{self._tmpdir}/{key}", ids[i])
                    process = subprocess.Popen(
                        [sys.executable, "-c", worker_loop_code(address)],
                        env=worker_environment(self._env),
                        start_new_session=True,  # outlives us; kill() ends its session
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    self._host_to_pid[key] = ProcessState(process.pid, address)
                    log.info("ProcessJob: host %s is pid %d at %s", key, process.pid, address)
        except BaseException:
            self._kill()  # a Ctrl-C midway must not leave the hosts started so far
            raise

    def _state(self) -> JobState:
        if not self._pids_active():
            raise RuntimeError("lost connection to worker processes (a host of the job ended)")
        return JobState(
            {
                mesh: attach_to_workers(
                    name=mesh,
                    ca=TRUST_ALL_CONNECTIONS,
                    workers=[self._host_to_pid[f"{mesh}_{i}"].channel for i in range(count)],
                )
                for mesh, count in self._meshes.items()
            }
        )

    def can_run(self, spec: JobTrait) -> bool:
        return isinstance(spec, ProcessJob) and spec._meshes == self._meshes and self._pids_active()

    def _pids_active(self) -> bool:
        if not self.active:
            return False
        pids = [state.pid for state in self._host_to_pid.values()]
        live = set(live_in_sessions(pids))
        return all(pid in live for pid in pids)

    def _kill(self) -> None:
        end_sessions([state.pid for state in self._host_to_pid.values()], _KILL_GRACE)
        self._host_to_pid.clear()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def hosts_from_config(name: str) -> HostMesh:
    """Monarch's stand-in for hosts named in a project's configuration: two worker loops
    on this machine, attached as the host mesh ``name``; they end with its shutdown, or
    with this process."""
    # Unlike a job's, these hosts end with this process too (no cache, nobody to kill them).
    job = ProcessJob({name: 2}, env={"ACTORMESH_PARENT_PID": str(os.getpid())})
    state = job.state(cached_path=None)
    folder = job._tmpdir
    if folder is not None:  # their sockets' folder goes with this process too
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    mesh: HostMesh = getattr(state, name)
    return mesh
