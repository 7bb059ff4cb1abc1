"""A job that outlives its controller: the controller's side of its lease.

``host_mesh(..., name="rl-exp", keep_alive=600)`` gives every host agent of the mesh a
lease (``_hosts._lease``) and writes the job's record (``_job_records``). From then on the
controller writes down, at every agent of the job, each process mesh spawned on those
hosts and each actor mesh spawned on those processes (``HOST record``: a pickled
description, opaque to the agents), so that a controller attaching later
(``actormesh.attach``) can give them back by name. Stopping a mesh removes its record;
shutting the host mesh down ends the job and removes its record file.

Names are how meshes come back, so they must be unique in a job: a second live process
mesh or actor mesh of the same name is refused at its spawn.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .._core import dumps
from .._hosts import AgentLink, Runtime, ask
from . import _job_records

if TYPE_CHECKING:
    from ._actor_mesh import ActorMesh
    from ._host_mesh import HostMesh
    from ._proc_mesh import ProcMesh

__all__ = [
    "LeasedJob",
    "actors_key",
    "check_free",
    "check_lease",
    "held",
    "hold",
    "procs_key",
    "start_lease",
]

log = logging.getLogger("actormesh.jobs")

HOSTS_KEY = "hosts"


def procs_key(name: str) -> str:
    """The record key of the process mesh ``name``."""
    return f"procs/{name}"


def actors_key(name: str) -> str:
    """The record key of the actor mesh ``name``."""
    return f"actors/{name}"


class LeasedJob:
    """The lease of one job, as its controller holds it.

    Args:
        name: the job's name.
        keep_alive: seconds its agents wait for a controller.
        links: its host agents, in host order.
        addresses: where each agent's lease listens.
    """

    def __init__(
        self, name: str, keep_alive: float, links: list[AgentLink], addresses: list[str]
    ) -> None:
        self.name = name
        self.keep_alive = keep_alive
        self.links = links
        self.addresses = addresses
        self.keys: set[str] = set()  # the records written (live meshes)
        self._mesh_keys: dict[str, str] = {}  # actor mesh id -> its record key
        # This process' handle on each mesh with a record, by its key.
        self.live: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<leased job {self.name!r}, keep_alive={self.keep_alive:g} s>"

    @property
    def held(self) -> bool:
        """True while this process is the job's controller."""
        return all(link.lost_reason is None for link in self.links)

    def meshes(self, kind: str) -> dict[str, Any]:
        """This process' handles on the job's live meshes of ``kind`` (``"procs"`` or
        ``"actors"``), by name."""
        prefix = f"{kind}/"
        return {k[len(prefix) :]: m for k, m in self.live.items() if k.startswith(prefix)}

    def _write(self, key: str, value: dict[str, Any] | None, mesh: Any = None) -> None:
        blob = None
        if value is not None:
            payload, buffers = dumps(value)
            assert not buffers, "a mesh record has no large buffers"
            blob = payload
        for link in self.links:
            if link.lost_reason is None:
                link.record(key, blob)
        self.remember(key, mesh if value is not None else None)

    def remember(self, key: str, mesh: Any) -> None:
        """``mesh`` is this process' handle on the mesh recorded as ``key`` (``None``:
        it was stopped)."""
        if mesh is None:
            self.keys.discard(key)
            self.live.pop(key, None)
        else:
            self.keys.add(key)
            self.live[key] = mesh

    def claim(self, key: str, what: str) -> None:
        """Refuse a second live mesh of one name (names are how meshes come back).

        Raises:
            ValueError: a live mesh of the job has the name already.
        """
        if key in self.keys:
            raise ValueError(
                f"job {self.name!r} already has a live {what} named "
                f"{key.split('/', 1)[1]!r}: a leased job's meshes come back by name, so "
                "give this one a name of its own"
            )

    def note_hosts(self, hosts: HostMesh) -> None:
        """Write down the job's host mesh."""
        self._write(HOSTS_KEY, {"name": self.name, "agents": list(self.addresses)}, hosts)
        hold(self)

    def note_procs(self, procs: ProcMesh, hosts: HostMesh, per_host: int) -> None:
        """Write down a process mesh spawned on ``hosts`` (a handle on the job's hosts)."""
        processes = procs._processes
        children = [(c.key, c.rank, c.listen_path, c.pid) for c in processes.children]
        self._write(procs_key(processes.name), {
            "name": processes.name,
            "labels": procs._shape.labels,
            "sizes": procs._shape.sizes,
            "host_ranks": hosts._shape.ranks,
            "host_labels": hosts._shape.labels,
            "host_sizes": hosts._shape.sizes,
            "per_host": per_host,
            "children": children,
        }, procs)  # fmt: skip
        processes.job = self

    def note_actors(self, mesh: ActorMesh[Any], actor_class: type, procs: ProcMesh) -> None:
        """Write down an actor mesh spawned on a process mesh of the job."""
        ref = mesh._ref
        key = actors_key(ref.name)
        self._mesh_keys[ref.mesh_id] = key
        mesh._state.job = self
        self._write(key, {
            "ref": ref,
            "procs": procs._processes.name,
            "class": (actor_class.__module__, actor_class.__qualname__),
        }, mesh)  # fmt: skip

    def adopt_actors(self, mesh: ActorMesh[Any]) -> None:
        """An actor mesh given back by its record (``attach``): its record is known."""
        key = actors_key(mesh.name)
        self._mesh_keys[mesh._ref.mesh_id] = key
        mesh._state.job = self
        self.remember(key, mesh)

    def forget_actors(self, mesh_id: str) -> None:
        """The actor mesh ``mesh_id`` was stopped: nobody will find it again."""
        key = self._mesh_keys.pop(mesh_id, None)
        if key is not None:
            self._write(key, None)

    def forget_procs(self, procs: ProcMesh) -> None:
        """The process mesh was stopped, and the actor meshes on it with it."""
        for mesh_id in procs._processes.meshes:
            self.forget_actors(mesh_id)
        self._write(procs_key(procs._processes.name), None)

    def let_go(self) -> None:
        """This process is no longer the job's controller."""
        if _HELD.get(self.name) is self:
            del _HELD[self.name]

    def ended(self) -> None:
        """The job was shut down: forget its record."""
        self.let_go()
        try:
            if _job_records.load(self.name).agents == tuple(self.addresses):
                _job_records.remove(self.name)
        except (LookupError, ValueError):
            pass


def check_free(name: str) -> None:
    """Refuse to start a job under the name of one that still runs (its record would be
    replaced, and the running job lost to ``attach``).

    Raises:
        ValueError: an agent of the job recorded under ``name`` answers.
    """
    try:
        record = _job_records.load(name)
    except (LookupError, ValueError):
        return
    for address in record.agents:
        try:
            sock, _ = ask(address, record.secret, {"op": "status"}, _PROBE_TIMEOUT)
        except (OSError, ValueError):
            continue  # gone: its record is stale
        sock.close()
        raise ValueError(
            f"a job named {name!r} is running (its agent at {address} answers): attach "
            f"to it with actormesh.attach({name!r}), end it with `actormesh kill {name}`, "
            "or give this job another name"
        )


# Seconds an agent of a job of the same name gets to answer (check_free).
_PROBE_TIMEOUT = 2.0

# The jobs this process is the controller of, by name.
_HELD: dict[str, LeasedJob] = {}


def hold(job: LeasedJob) -> None:
    """This process is ``job``'s controller now."""
    _HELD[job.name] = job


def held(name: str) -> LeasedJob | None:
    """The job ``name`` if this process is its controller (started or attached it)."""
    job = _HELD.get(name)
    return job if job is not None and job.held else None


async def start_lease(
    runtime: Runtime,
    name: str,
    keep_alive: float,
    links: list[AgentLink],
    workers: tuple[str, ...] = (),
) -> LeasedJob:
    """Give each agent of ``links`` a lease of ``keep_alive`` seconds, and write the job's
    record (loop thread); ``workers``: the worker loops the agents serve, if any."""
    addresses = [await link.lease(name, keep_alive) for link in links]
    job = LeasedJob(name, keep_alive, links, addresses)
    _job_records.save(name, addresses, runtime.secret, keep_alive, workers=workers)
    return job


def check_lease(name: object, keep_alive: object) -> None:
    """Refuse a lease that cannot be: a ``keep_alive`` that is not a positive number of
    seconds, a missing or bad job ``name``, or the name of a job that runs.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: any other of the above.
    """
    if isinstance(keep_alive, bool) or not isinstance(keep_alive, int | float):
        raise ValueError(f"keep_alive must be a number of seconds, not {keep_alive!r}")
    if not keep_alive > 0:
        raise ValueError(f"keep_alive must be positive, not {keep_alive!r}")
    if name is None:
        raise ValueError("keep_alive needs a name= for the job: it is attached by name")
    check_free(_job_records.check_name(name))
