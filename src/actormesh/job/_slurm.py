"""``SlurmJob``: the job's hosts are the nodes of one Slurm allocation.

``apply()`` submits a batch script with ``sbatch`` whose one step, ``srun`` with one task
per node, runs a worker loop on every node (listening on ``monarch_port`` on every
interface). ``state()`` waits until Slurm runs the job, reads its nodes (``squeue``) and
their addresses (``scontrol show node``: ``NodeAddr``, so nothing is resolved by name),
and attaches to the worker loops, the nodes split among the meshes in order. The job
stays allocated when the controller exits: a re-run finds it in the cache, sees it still
running (``squeue``) and attaches to the same worker loops, with no new ``sbatch``.
``kill()`` shuts the hosts down and ``scancel``s the job, and returns once Slurm no
longer runs it.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._api import attach_to_workers
from ._identity import (
    SERVICE_PROC_IDS_ENV,
    allocate_service_proc_ids,
    serialize_service_proc_ids,
    service_proc_addrs,
)
from ._process import OWNER_VARIABLES, TRUST_ALL_CONNECTIONS, check_meshes
from ._trait import JobState, JobTrait

__all__ = ["SlurmJob"]

log = logging.getLogger("actormesh.job")

# Job states after which the allocation is gone (squeue's long names).
_ENDED = frozenset(
    {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY"}
    | {"PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT"}
)
# Seconds between looks at the queue while waiting for Slurm (it answers in its time).
_POLL = 0.25
# Seconds kill() waits for Slurm to finish with a cancelled job.
_CANCEL_WAIT = 60.0

# What each node runs: a worker loop on every interface, its proc id picked by node rank.
_WORKER = (
    "from actormesh.actor import run_worker_loop_forever; "
    "from actormesh.job import ranked_service_proc_id_from_env, service_proc_addr; "
    "run_worker_loop_forever(address=service_proc_addr({address!r}, "
    "ranked_service_proc_id_from_env(rank_env='SLURM_NODEID')), ca={ca!r})"
)


def _slurm(*argv: str, stdin: str | None = None) -> str:
    """Run a Slurm command; its output.

    Raises:
        RuntimeError: the command is not installed, or failed (with its stderr).
    """
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError:
        raise RuntimeError(f"SlurmJob needs Slurm's {argv[0]} on PATH") from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()}")
    return done.stdout


class SlurmJob(JobTrait):
    """A job of Slurm nodes, one worker loop per node (see the module docstring).

    Args mirror Monarch's: ``meshes`` (mesh name to number of nodes), ``python_exe`` (the
    Python on the nodes that has actormesh), ``slurm_args`` (extra ``#SBATCH`` lines:
    each argument starting with ``-``), ``monarch_port`` (the worker loops' TCP port),
    ``job_name``, ``ntasks_per_node``, ``time_limit``, ``partition``, ``log_dir`` (the
    job's ``slurm_%j_*.out``/``.err``; default the working directory), ``exclusive``,
    ``gpus_per_node``, ``cpus_per_task``, ``mem``, ``job_start_timeout`` (seconds to
    wait for the job to run; ``None``: forever), ``account``, ``qos``, ``bind_to``
    (the IP the worker loops listen on; default every interface).

    Raises:
        NotImplementedError: ``out_of_cluster`` or ``attach_to`` (Monarch's gateway for a
            controller outside the cluster's network: actormesh has none).
        ValueError: ``bind_to`` is not an IP address.
    """

    def __init__(
        self,
        meshes: Mapping[str, int],
        python_exe: str = "python",
        slurm_args: Sequence[str] = (),
        monarch_port: int = 22222,
        job_name: str = "monarch_job",
        ntasks_per_node: int = 1,
        time_limit: str | None = None,
        partition: str | None = None,
        log_dir: str | None = None,
        exclusive: bool = True,
        gpus_per_node: int | None = None,
        cpus_per_task: int | None = None,
        mem: str | None = None,
        job_start_timeout: int | None = None,
        account: str | None = None,
        qos: str | None = None,
        out_of_cluster: bool = False,
        attach_to: str | None = None,
        bind_to: str | None = None,
    ) -> None:
        if out_of_cluster or attach_to is not None:
            raise NotImplementedError(
                "SlurmJob(out_of_cluster=..., attach_to=...) needs Monarch's gateway "
                "through a worker, which actormesh has not: run the controller where it "
                "reaches the nodes (a login node)"
            )
        if bind_to is not None:
            import ipaddress

            try:
                bind_to = str(ipaddress.ip_address(bind_to))
            except ValueError:
                raise ValueError(
                    f"bind_to must be an IPv4 or IPv6 address without a port, not {bind_to!r}"
                ) from None
        super().__init__()
        self._meshes = check_meshes(meshes)
        self._python_exe = python_exe
        self._slurm_args = tuple(slurm_args)
        self._port = monarch_port
        self._job_name = job_name
        self._ntasks_per_node = ntasks_per_node
        self._time_limit = time_limit
        self._partition = partition
        self._log_dir = log_dir if log_dir is not None else os.getcwd()
        self._exclusive = exclusive
        self._gpus_per_node = gpus_per_node
        self._cpus_per_task = cpus_per_task
        self._mem = mem
        self._job_start_timeout = job_start_timeout
        self._account = account
        self._qos = qos
        self._bind_to = bind_to
        self._slurm_job_id: str | None = None
        self._all_hostnames: list[str] = []
        self._service_proc_ids: list[Any] = []

    def add_mesh(self, name: str, num_nodes: int) -> None:
        """Ask for one more host mesh (before ``apply()``)."""
        self._meshes = check_meshes({**self._meshes, name: num_nodes})

    @property
    def slurm_job_id(self) -> str | None:
        """Slurm's id of the job's allocation, once submitted."""
        return self._slurm_job_id

    # -- submitting -----------------------------------------------------------------------

    def batch_script(self) -> str:
        """The script ``apply()`` gives ``sbatch``."""
        nodes = sum(self._meshes.values())
        name = f"{self._job_name}_{os.getpid()}"
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --ntasks-per-node={self._ntasks_per_node}",
            f"#SBATCH --nodes={nodes}",
            f"#SBATCH --output={os.path.join(self._log_dir, f'slurm_%j_{name}.out')}",
            f"#SBATCH --error={os.path.join(self._log_dir, f'slurm_%j_{name}.err')}",
        ]
        options = [
            ("time", self._time_limit),
            ("gpus-per-node", self._gpus_per_node),
            ("cpus-per-task", self._cpus_per_task),
            ("mem", self._mem),
            ("partition", self._partition),
            ("account", self._account),
            ("qos", self._qos),
        ]
        lines += [f"#SBATCH --{option}={value}" for option, value in options if value is not None]
        if self._exclusive:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {arg}" for arg in self._slurm_args if arg.startswith("-")]
        # sbatch passes our environment on: not what says who owns this process.
        lines.append(f"unset {' '.join(OWNER_VARIABLES)}")
        ids = serialize_service_proc_ids(self._service_proc_ids)
        lines.append(f"export {SERVICE_PROC_IDS_ENV}={shlex.quote(ids)}")
        bind = f"[{self._bind_to}]" if self._bind_to and ":" in self._bind_to else self._bind_to
        address = f"tcp://{bind or '0.0.0.0'}:{self._port}"
        code = _WORKER.format(address=address, ca=TRUST_ALL_CONNECTIONS)
        # One worker loop per node; `exec` so the step is the batch script's last word.
        lines.append(
            f"exec srun --ntasks-per-node=1 {shlex.quote(self._python_exe)} -c {shlex.quote(code)}"
        )
        return "\n".join(lines) + "\n"

    def _create(self, client_script: str | None) -> None:
        nodes = sum(self._meshes.values())
        self._service_proc_ids = allocate_service_proc_ids(nodes)
        self._all_hostnames = []
        os.makedirs(self._log_dir, exist_ok=True)
        out = _slurm("sbatch", "--parsable", stdin=self.batch_script())
        self._slurm_job_id = out.strip().split(";")[0]
        log.info("SlurmJob: submitted job %s (%d nodes)", self._slurm_job_id, nodes)

    # -- the allocation -------------------------------------------------------------------

    def _job_state(self) -> tuple[str, str] | None:
        """Slurm's state of the job and its node list; ``None`` once Slurm forgot it."""
        if self._slurm_job_id is None:
            return None
        try:
            out = _slurm("squeue", "-h", "-t", "all", "-j", self._slurm_job_id, "-o", "%T|%N")
        except RuntimeError as error:
            if "Invalid job id" in str(error):
                return None
            raise
        line = out.strip().splitlines()[0] if out.strip() else ""
        if not line:
            return None
        state, _, nodes = line.partition("|")
        return state, nodes

    def _jobs_active(self) -> bool:
        """Whether the allocation can serve: queued or running, not ending."""
        found = self._job_state()
        return found is not None and found[0] not in _ENDED and found[0] != "COMPLETING"

    def _in_queue(self) -> bool:
        """Whether Slurm still has the job, finishing it included."""
        found = self._job_state()
        return found is not None and found[0] not in _ENDED

    def _wait_for_nodes(self) -> list[str]:
        """Wait until Slurm runs the job; its node names, in node-rank order."""
        deadline = None
        if self._job_start_timeout is not None:
            deadline = time.monotonic() + self._job_start_timeout
        while True:
            found = self._job_state()
            if found is None or found[0] in _ENDED:
                state = found[0] if found else "gone from the queue"
                raise RuntimeError(f"Slurm job {self._slurm_job_id} is not running: {state}")
            state, nodelist = found
            if state == "RUNNING" and nodelist:
                names = _slurm("scontrol", "show", "hostnames", nodelist).split()
                expected = sum(self._meshes.values())
                if len(names) != expected:
                    raise RuntimeError(
                        f"Slurm job {self._slurm_job_id} got {len(names)} nodes, not "
                        f"{expected}; partial allocations are not supported"
                    )
                return names
            if deadline is not None and time.monotonic() > deadline:
                self._kill()
                raise RuntimeError(
                    f"Slurm job {self._slurm_job_id} did not start within "
                    f"{self._job_start_timeout} s (state {state}); cancelled"
                )
            time.sleep(_POLL)

    def _state(self) -> JobState:
        if not self._all_hostnames:
            self._all_hostnames = self._wait_for_nodes()
        elif not self._jobs_active():
            raise RuntimeError(f"Slurm job {self._slurm_job_id} is no longer running")
        addresses = [f"tcp://{_node_address(name)}:{self._port}" for name in self._all_hostnames]
        workers = service_proc_addrs(addresses, self._service_proc_ids)
        meshes = {}
        start = 0
        for mesh, count in self._meshes.items():
            meshes[mesh] = attach_to_workers(
                name=mesh, ca=TRUST_ALL_CONNECTIONS, workers=workers[start : start + count]
            )
            start += count
        return JobState(meshes)

    def can_run(self, spec: JobTrait) -> bool:
        if not isinstance(spec, SlurmJob):
            return False
        # Every setting of the allocation; a change in any needs a new one.
        same = [
            "_meshes",
            "_python_exe",
            "_slurm_args",
            "_port",
            "_job_name",
            "_ntasks_per_node",
            "_time_limit",
            "_partition",
            "_gpus_per_node",
            "_cpus_per_task",
            "_mem",
            "_account",
            "_qos",
            "_bind_to",
        ]
        return all(getattr(spec, a) == getattr(self, a) for a in same) and self._jobs_active()

    def _kill(self) -> None:
        job_id = self._slurm_job_id
        if job_id is None:
            return
        try:
            _slurm("scancel", job_id)
        except RuntimeError as error:
            log.info("scancel %s: %s", job_id, error)  # ended by itself already
        deadline = time.monotonic() + _CANCEL_WAIT
        while self._in_queue() and time.monotonic() < deadline:
            time.sleep(_POLL)
        self._slurm_job_id = None
        self._all_hostnames = []


def _node_address(name: str) -> str:
    """The address Slurm reaches node ``name`` at (its ``NodeAddr``)."""
    for field in _slurm("scontrol", "show", "node", "-o", name).split():
        key, _, value = field.partition("=")
        if key == "NodeAddr" and value:
            return value
    return name
