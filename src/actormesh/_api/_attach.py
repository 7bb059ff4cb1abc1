"""``actormesh.attach``: a new controller for a leased job, its meshes back by name.

A job started with ``host_mesh(..., name=..., keep_alive=...)`` runs on when its
controller goes (``_leased_job``, ``_hosts._lease``). ``attach(name)`` finds the job's
agents through its record (``_job_records``), proves the job's secret to each, becomes
the controller of each (one controller at a time: a second is refused unless it passes
``take_over=True``), rebuilds the job's host mesh, process meshes and actor meshes from
the records the agents keep, and then asks each agent for what happened while nobody
was attached: output is printed as it would have been, failures go to supervision as
if they had just happened. The actors are the same processes, with their state: calls
go to them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from .._core import loads
from .._exceptions import ActorDiedError
from .._hosts import (
    AgentLink,
    AttachRefusedError,
    ChildProcess,
    RelayedProcess,
    Runtime,
    WorkerSpec,
    ask,
)
from .._shape import Shape
from .._transport import AuthenticationError
from . import _job_records, _restart, _supervision
from ._actor_mesh import ActorMesh
from ._allocator import LocalAllocator
from ._host_mesh import HostMesh, _Attached, _Hosts
from ._leased_job import HOSTS_KEY, LeasedJob, held, hold, procs_key
from ._mesh_state import Failure, fresh_state
from ._proc_mesh import ProcMesh, managed
from ._supervision import actor_name

__all__ = ["AttachRefusedError", "Job", "attach"]

log = logging.getLogger("actormesh.jobs")

# The jobs this process is attached to, by name: ``attach`` again returns the same one.
_ATTACHED: dict[str, Job] = {}


class Job:
    """A leased job this process is the controller of (``attach`` returns it).

    Its meshes are this process' handles on the job's live meshes: those given back by
    ``attach`` and those spawned on the job's hosts since.

    Attributes:
        name: the job's name.
        keep_alive: its lease, in seconds.
        hosts: its host mesh.
        failures: the failures that happened while no controller was attached and that
            no failure hook handled (the hook, if set before ``attach``, got them all).
        problems: records that could not be read back (a mesh whose record needs a
            class this process cannot import, say).
    """

    def __init__(self, leased: LeasedJob) -> None:
        self._leased = leased
        self.name = leased.name
        self.keep_alive = leased.keep_alive
        self.hosts: HostMesh = leased.live[HOSTS_KEY]
        self.failures: list[Failure] = []
        self.problems: list[str] = []

    @property
    def host_meshes(self) -> dict[str, HostMesh]:
        """Its host mesh, by the job's name."""
        return {self.name: self.hosts}

    @property
    def proc_meshes(self) -> dict[str, ProcMesh]:
        """Its process meshes, by name."""
        return self._leased.meshes("procs")

    @property
    def actor_meshes(self) -> dict[str, ActorMesh[Any]]:
        """Its actor meshes, by name."""
        return self._leased.meshes("actors")

    def __getitem__(self, name: str) -> Any:
        """The actor mesh, else the process mesh, else the host mesh called ``name``."""
        for meshes in (self.actor_meshes, self.proc_meshes, self.host_meshes):
            if name in meshes:
                return meshes[name]
        raise KeyError(f"job {self.name!r} has no mesh named {name!r}: {sorted(self.names())}")

    def names(self) -> set[str]:
        """The names of every mesh of the job."""
        return {*self.actor_meshes, *self.proc_meshes, *self.host_meshes}

    @property
    def attached(self) -> bool:
        """True while this process is the job's controller."""
        return not self.hosts._hosts.stopped and self._leased.held

    def detach(self) -> None:
        """Stop being the job's controller; the job runs on (its lease starts counting).

        Calls to its meshes from this process fail from now on; ``attach`` again to
        come back.
        """
        _ATTACHED.pop(self.name, None)
        self._leased.let_go()
        runtime = Runtime.get()
        runtime.run_sync(_let_go(runtime, self), timeout=30)

    def kill(self) -> None:
        """End the job everywhere: its actors, processes and agents; forget its record."""
        _ATTACHED.pop(self.name, None)
        self.hosts.shutdown().get(timeout=60)
        _job_records.remove(self.name)

    def __repr__(self) -> str:
        return f"<Job {self.name!r}: {sorted(self.names())}>"


def attach(
    name: str | None = None,
    *,
    take_over: bool = False,
    secret: str | None = None,
    agents: Sequence[str] | None = None,
    timeout: float = 30.0,
) -> Job:
    """Become the controller of the leased job ``name``; its meshes, by name.

    Args:
        name: the job (``None``: ``$ACTORMESH_JOB``, which ``actormesh exec`` sets).
        take_over: if another controller is attached, detach it and take its place
            (without: refused).
        secret: the job's secret (default: the one in the job's record).
        agents: where the job's agents' leases listen (default: the record's), for a
            controller on a machine without the record.
        timeout: seconds to reach each agent.

    Returns the same ``Job`` when this process is attached to it already.

    Raises:
        ValueError: no name (and no ``$ACTORMESH_JOB``), or one that names no job; no
            secret with ``agents``; this process already uses another job's secret.
        LookupError: no record of the job here, or the job is gone (no agent answers:
            its lease expired, or it was killed).
        AuthenticationError: the secret is not the job's (refused before anything else
            is read).
        AttachRefusedError: another controller is attached (see ``take_over``).
    """
    name = name if name is not None else os.environ.get("ACTORMESH_JOB")
    if name is None:
        raise ValueError("attach() needs the job's name (or $ACTORMESH_JOB, as `exec` sets)")
    _job_records.check_name(name)
    if not isinstance(take_over, bool):
        raise TypeError(f"take_over must be True or False, not {take_over!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    known = _ATTACHED.get(name)
    if known is not None and known.attached:
        return known
    mine = held(name)
    if mine is not None:  # this process started the job, and runs it still
        _ATTACHED[name] = Job(mine)
        return _ATTACHED[name]
    created: float | None = None
    workers: tuple[str, ...] = ()
    if agents is None:
        record = _job_records.load(name)
        addresses = list(record.agents)
        secret = secret or record.secret
        created, workers = record.created, record.workers
    else:
        addresses = [str(address) for address in agents]
        if not addresses:
            raise ValueError("agents= names no agent")
    runtime = Runtime.get()
    secret = secret or runtime.config.secret
    if not secret:
        raise ValueError(f"attaching to job {name!r} needs its secret (secret= or its record)")
    try:
        runtime.use_secret(secret)
    except ValueError as error:
        raise ValueError(
            f"cannot attach to job {name!r} from this process: {error} (a process serves "
            "one job's secret; attach from a new process)"
        ) from None
    _supervision.install(runtime)
    runtime.fresh_request_ids()
    controller = {"pid": os.getpid(), "host": socket.gethostname(), "program": sys.argv[0]}
    links, missing = runtime.run_sync(
        _connect(runtime, name, addresses, secret, take_over, controller, timeout),
        timeout=timeout * 2 + runtime.config.spawn_timeout,
    )
    try:
        job = _rebuild(runtime, name, links)
        job.problems.extend(f"no agent answers at {where}" for where in missing)
        counts = [runtime.submit(link.replay()) for link in links]
        for done in counts:
            done.result(timeout)
        if missing:
            runtime.run_sync(_report_lost(job, missing), timeout=30)
    except BaseException:
        runtime.run_sync(_close(runtime, links), timeout=30)
        raise
    for meshes in job.actor_meshes.values():
        job.failures.extend(meshes._state.unhandled)
    _job_records.save(name, addresses, secret, job.keep_alive, created, workers)  # (who)
    _ATTACHED[name] = job
    return job


def _dial(
    address: str, secret: str, take_over: bool, controller: dict[str, Any], timeout: float
) -> socket.socket:
    request = {"op": "attach", "take_over": take_over, "controller": controller}
    sock, _ = ask(address, secret, request, timeout)
    return sock


async def _connect(
    runtime: Runtime,
    name: str,
    addresses: list[str],
    secret: str,
    take_over: bool,
    controller: dict[str, Any],
    timeout: float,
) -> tuple[list[AgentLink], list[str]]:
    """Attach to every agent that answers (loop thread); the links, and why each of the
    others did not answer. Refused by one (another controller, a wrong secret): by none.

    Raises:
        LookupError: no agent answered (the job is gone).
    """
    attempts = await asyncio.gather(
        *(
            runtime.host_agents.attach_agent(
                address, functools.partial(_dial, address, secret, take_over, controller, timeout)
            )
            for address in addresses
        ),
        return_exceptions=True,
    )
    links = [found for found in attempts if isinstance(found, AgentLink)]
    for link in links:
        link.hold()
    missing = []
    refused: BaseException | None = None
    for address, found in zip(addresses, attempts, strict=True):
        # Nobody listens, or answers, there: that agent ended (its host died, say). A
        # wrong secret is an OSError too, and is a refusal.
        if isinstance(found, OSError) and not isinstance(found, AuthenticationError):
            missing.append(f"{address}: {type(found).__name__}: {found}")
        elif isinstance(found, BaseException) and refused is None:
            refused = found
    if refused is not None or not links:
        await _close(runtime, links)  # they go back to their lease
        if refused is not None:
            raise refused
        raise LookupError(
            f"job {name!r} is gone: no agent answers ({'; '.join(missing)}): its lease "
            "expired, or it was killed"
        )
    return links, missing


async def _close(runtime: Runtime, links: list[AgentLink]) -> None:
    """Let ``links``' agents go without ending anything (loop thread)."""
    for link in links:
        runtime.children.let_go([link.process, *link.workers.values()])
        link.conn.close()


async def _let_go(runtime: Runtime, job: Job) -> None:
    for meshes in job.actor_meshes.values():
        meshes._state.note_stop(f"this process detached from job {job.name!r}")
        meshes._state.stopped = True
    for procs in job.proc_meshes.values():
        procs._processes.stopped = True
    job.hosts._hosts.stopped = True
    await _close(runtime, [link for link in job.hosts._hosts.links if link is not None])


def _rebuild(runtime: Runtime, name: str, links: list[AgentLink]) -> Job:
    """The job's meshes, from the records its agents keep (any thread)."""
    records: dict[str, Any] = {}
    problems = []
    for link in links:
        for key, blob in (link.lease_info or {}).get("records", {}).items():
            if key in records:
                continue
            try:
                records[key] = loads(blob)
            except Exception as error:  # a class this process cannot import, say
                problems.append(f"{key}: {type(error).__name__}: {error}")
    lease = links[0].lease_info or {}
    keep_alive = float(lease.get("keep_alive", 0.0))
    hosts = HostMesh(_Hosts(list(links), _Attached()), Shape.from_dims(("hosts",), (len(links),)))
    addresses = [str((link.lease_info or {}).get("address", "")) for link in links]
    leased = LeasedJob(name, keep_alive, links, addresses)
    hosts._hosts.job = leased
    leased.remember(HOSTS_KEY, hosts)
    processes = runtime.run_sync(_adopt_workers(runtime, links), timeout=30)
    meshes_of: dict[str, list[str]] = {}
    for key, record in sorted(records.items()):
        if key.startswith("procs/"):
            procs = _procs_from(runtime, record, processes, hosts)
            procs._processes.job = leased
            leased.remember(procs_key(record["name"]), procs)
            meshes_of[record["name"]] = procs._processes.meshes
    for key, record in sorted(records.items()):
        if key.startswith("actors/"):
            mesh = _actors_from(record, processes)
            leased.adopt_actors(mesh)
            meshes_of.setdefault(record["procs"], []).append(mesh._ref.mesh_id)
    hold(leased)
    job = Job(leased)
    job.problems = problems
    return job


async def _report_lost(job: Job, missing: list[str]) -> None:
    """The actors on hosts whose agents did not answer are gone: a failure of each
    mesh they belong to, as for any death while nobody was attached (loop thread)."""
    for mesh in job.actor_meshes.values():
        state = mesh._state
        ranks = tuple(r for r, why in sorted(state.dead.items()) if why.endswith(_GONE))
        if not ranks:
            continue
        reason = f"its host agent is gone ({'; '.join(missing)})"
        error = ActorDiedError(
            f"the process of actor(s) {list(ranks)} of mesh '{mesh.name}' {reason}",
            reason=reason,
            ranks=ranks,
        )
        cause = f"the host this actor was running on is gone: {reason}"
        failure = Failure(mesh.name, ranks, "died", error, actor_name(state, ranks[0]), cause)
        _supervision.report(state, failure)


# How a rank whose process no agent told of is marked dead.
_GONE = "is gone (its host agent did not answer)"


async def _adopt_workers(
    runtime: Runtime, links: list[AgentLink]
) -> dict[str, tuple[ChildProcess, str | None]]:
    """Own the workers the agents told of (loop thread); each by its address, with why
    it is dead (``None``: alive)."""
    found: dict[str, tuple[ChildProcess, str | None]] = {}
    for link in links:
        for worker in (link.lease_info or {}).get("workers", []):
            spec = WorkerSpec(str(worker["key"]), int(worker["rank"]))
            address = str(worker["address"])
            process = RelayedProcess(link, spec, address, int(worker["pid"]))
            if worker["alive"]:
                link.workers[address] = process
                runtime.children.own_relayed(process)
                found[address] = (process, None)
            else:
                reason = f"process {process.pid} on {link.hostname} {worker['reason']}"
                process.popen.returncode = 1
                runtime.mark_dead(address, reason)
                found[address] = (process, reason)
    return found


def _procs_from(
    runtime: Runtime,
    record: dict[str, Any],
    processes: dict[str, tuple[ChildProcess, str | None]],
    hosts: HostMesh,
) -> ProcMesh:
    children: list[ChildProcess] = []
    for key, rank, address, pid in record["children"]:
        known = processes.get(address)
        if known is None:  # its agent forgot it (a dead worker let go): dead here too
            gone = RelayedProcess(hosts._hosts.links[0], WorkerSpec(key, rank), address, pid)  # type: ignore[arg-type]
            gone.popen.returncode = 1
            runtime._dead_paths.setdefault(address, f"process {pid} {_GONE}")
            children.append(gone)
        else:
            children.append(known[0])
    shape = Shape.from_dims(record["labels"], record["sizes"])
    never = _restart.RestartPolicy("never", 0, 60.0)
    procs = managed(runtime, record["name"], children, LocalAllocator(), shape, never)
    host_shape = Shape(record["host_labels"], record["host_sizes"], record["host_ranks"])
    procs._processes.hosts = (hosts._with_shape(host_shape), record["per_host"])
    hosts._hosts.procs.append(procs)
    return procs


def _actors_from(
    record: dict[str, Any], processes: dict[str, tuple[ChildProcess, str | None]]
) -> ActorMesh[Any]:
    from .. import _observe

    ref = record["ref"]
    fresh_state(ref.mesh_id, ref.name, ref.paths)  # (this process may have detached from it)
    mesh: ActorMesh[Any] = ActorMesh(ref, Shape.from_dims(ref.labels, ref.sizes), _class(record))
    for rank, address in enumerate(ref.paths):
        known = processes.get(address)
        why = f"process {address} {_GONE}" if known is None else known[1]
        if why is not None:
            mesh._state.dead.setdefault(rank, why)
    _observe.spawned(mesh)
    return mesh


def _class(record: dict[str, Any]) -> type | None:
    """The actor class of a record, if this process can import it (calls need only the
    endpoints the record names; the class adds type hints and better messages)."""
    module, qualname = record["class"]
    with contextlib.suppress(Exception):
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        if isinstance(found, type):
            return found
    return None
