"""``HostMesh``: hosts with named dimensions, where process meshes are made.

Three levels, as in Monarch: hosts, processes, actors. ``this_host()`` is the host this
code runs on (no dimensions); ``host_mesh(hosts=N, allocator=...)`` gives a mesh of
remote hosts, each served by a host agent (``actormesh._hosts``), with a ``hosts``
dimension. ``host_mesh.spawn_procs(per_host={"gpus": 8})`` starts that many processes on
every host of the mesh and returns their ``ProcMesh`` (dimensions: the host mesh's, then
``per_host``'s). ``this_proc()`` is the process this code runs in, as a one-process mesh:
actors spawned there live in this very process.

The host the code runs on needs no agent process: this process' own runtime starts,
watches and restarts its local workers, and they talk to it over Unix sockets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .._hosts import (
    AgentLink,
    ChildProcess,
    ProcessSetup,
    Runtime,
    WorkerSpec,
    check_fan_out,
    prepare,
)
from .._shape import Point, Shape, Shaped
from .._transport import parse_worker_address
from . import _restart, _supervision
from ._allocator import Allocator, HostAllocator, LocalAllocator, ProcessSpec
from ._bootstrap_command import (
    HOST_BOOTSTRAP_VARIABLE,
    BootstrapCommand,
    default_bootstrap_cmd,
    host_bootstrap,
)
from ._future import Future, from_concurrent
from ._job_records import leased_at
from ._leased_job import LeasedJob, check_lease, procs_key, start_lease
from ._proc_mesh import ProcMesh, managed, process_specs

__all__ = ["HostMesh", "attach_to_workers", "host_mesh", "this_host", "this_proc"]

T = TypeVar("T")

log = logging.getLogger("actormesh.jobs")

Env = Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None


class _Hosts:
    """The hosts of one host mesh, shared by its slices: ``None`` is this host."""

    def __init__(self, links: list[AgentLink | None], allocator: Any = None) -> None:
        self.links = links
        self.allocator = allocator
        self.stopped = False
        # Process meshes started on these hosts: stopped before the hosts go.
        self.procs: list[ProcMesh] = []
        # The lease of a job that outlives its controller (host_mesh(keep_alive=...)).
        self.job: LeasedJob | None = None


class HostMesh(Shaped):
    """Hosts with named dimensions; ``this_host()`` or ``host_mesh(...)`` give one.

    A host mesh may carry a ``BootstrapCommand`` (``with_python_executable``): the
    processes spawned on it start that way, and so do those they spawn on
    ``this_host()`` in turn.
    """

    def __init__(
        self, hosts: _Hosts, shape: Shape, bootstrap_command: BootstrapCommand | None = None
    ) -> None:
        self._hosts = hosts
        self._shape = shape
        self._bootstrap_command = bootstrap_command

    def _with_shape(self, shape: Shape) -> HostMesh:
        return HostMesh(self._hosts, shape, self._bootstrap_command)

    @property
    def is_fake_in_process(self) -> bool:
        """False: the processes spawned on a host mesh are real processes (Monarch's
        in-process fake hosts have no counterpart in actormesh)."""
        return False

    def with_python_executable(self, python_executable: str) -> HostMesh:
        """This host mesh, spawning its processes with ``python_executable`` (a Python,
        or a wrapper script that ends by running one with its arguments).

        Processes spawned on the new mesh start as ``python_executable -m
        actormesh._bootstrap``; so do the processes they spawn on ``this_host()``. This
        mesh is not changed.
        """
        if not isinstance(python_executable, str) or not python_executable:
            raise TypeError(f"python_executable must be a path, not {python_executable!r}")
        command = BootstrapCommand(python_executable, None, default_bootstrap_cmd().args, {})
        return HostMesh(self._hosts, self._shape, command)

    @property
    def initialized(self) -> Future[bool]:
        """Resolves to True: a host mesh is ready once it exists."""
        runtime = Runtime.get()
        future: Future[bool] = Future._new(runtime.in_loop_thread)
        future._set_result(True)
        return future

    def spawn_procs(
        self,
        per_host: Mapping[str, int] | None = None,
        bootstrap: Callable[[], Any] | None = None,
        name: str | None = None,
        *,
        env: Env = None,
        restart: _restart.RestartMode = "never",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        bootstrap_command: BootstrapCommand | Callable[[Point], BootstrapCommand] | None = None,
    ) -> ProcMesh:
        """Start ``per_host`` processes on every host of this mesh; their process mesh.

        Returns once every process is up (and ``bootstrap`` ran in each). Its dimensions
        are this mesh's followed by ``per_host``'s: ``{"gpus": 4}`` on ``this_host()``,
        ``{"hosts": 2, "gpus": 4}`` on two hosts.

        Args:
            per_host: the processes of each host, by dimension (``None``: one).
            bootstrap: called in each new process before any actor is built there (a
                coroutine function is run to completion); if it raises, the spawn fails
                with its traceback and the processes are stopped.
            name: a label for output prefixes and messages.
            env: extra environment variables for every process, or a function giving
                each its own from its coordinates.
            restart: ``"rank"`` replaces a process that dies (see ``proc_mesh``).
            max_restarts: restarts allowed per rank within ``restart_window`` seconds.
            restart_window: the sliding window of ``max_restarts``, in seconds.
            bootstrap_command: how to start the processes: a ``BootstrapCommand``
                (``default_bootstrap_cmd().with_env({...})``, say), or a function giving
                each its own from its ``Point`` in the new mesh; for this spawn only.
                ``None``: the host mesh's (``with_python_executable``), else as usual.

        Raises:
            TypeError: ``bootstrap_command`` is not a ``BootstrapCommand`` (nor a
                function returning one).
            ValueError: a ``per_host`` dimension is already a dimension of the host mesh.
            RuntimeError: called on the event loop that would start the processes (inside
                an ``async`` endpoint): ``await proc_mesh(...)`` there instead.
        """
        if self._hosts.stopped:
            raise RuntimeError("this host mesh was shut down")
        if per_host is not None and not isinstance(per_host, Mapping):
            raise TypeError(
                f"per_host must map dimension names to sizes, such as {{'gpus': 4}}, "
                f"not {per_host!r}"
            )
        per_host = dict(per_host or {})
        overlap = [label for label in per_host if label in self._shape.labels]
        if overlap:
            raise ValueError(
                f"per_host labels {overlap} overlap with host labels {self._shape.labels}"
            )
        shape = Shape.from_dims(
            (*self._shape.labels, *per_host), (*self._shape.sizes, *per_host.values())
        )
        policy = _restart.RestartPolicy(restart, max_restarts, restart_window)
        runtime = Runtime.get()
        if runtime.in_loop_thread():
            raise RuntimeError(
                "spawn_procs() waits for the processes to start, which this event loop does: "
                "in an async endpoint use `await proc_mesh(...)` instead"
            )
        _supervision.install(runtime)
        label = name or "procs"
        job = self._hosts.job
        if job is not None:
            job.claim(procs_key(label), "process mesh")
        specs = self._with_commands(process_specs(shape, label, env), bootstrap_command)
        links = [self._hosts.links[rank] for rank in self._shape.ranks]
        start = _launch(runtime, links, specs, math.prod(per_host.values()), bootstrap)

        async def build() -> ProcMesh:
            children = await start
            procs = managed(runtime, label, children, LocalAllocator(), shape, policy)
            procs._processes.hosts = (self, math.prod(per_host.values()))
            return procs

        wait = runtime.config.spawn_timeout * 2 + 30  # the launch itself times out first
        procs = runtime.submit(build()).result(wait)
        self._hosts.procs.append(procs)
        if job is not None:
            job.note_procs(procs, self, math.prod(per_host.values()))
        return procs

    def _with_commands(
        self,
        specs: list[ProcessSpec],
        given: BootstrapCommand | Callable[[Point], BootstrapCommand] | None,
    ) -> list[ProcessSpec]:
        """``specs`` with how each process starts, and the command ``this_host()`` has
        there (this mesh's, or none: never one a process inherited from its spawner)."""
        mine = self._bootstrap_command
        host = {HOST_BOOTSTRAP_VARIABLE: mine._to_json() if mine is not None else ""}
        chosen = mine if given is None else given
        uniform = None
        if isinstance(chosen, BootstrapCommand):
            uniform = chosen._launch()
        elif chosen is not None and not callable(chosen):
            raise TypeError(
                "bootstrap_command must be a BootstrapCommand or a function of a Point "
                f"returning one, not {chosen!r}"
            )
        result = []
        for spec in specs:
            command = uniform
            if chosen is not None and uniform is None:
                made = chosen(spec.point)  # type: ignore[operator]
                if not isinstance(made, BootstrapCommand):
                    raise TypeError(
                        f"bootstrap_command({spec.point}) returned {made!r}, not a command"
                    )
                command = made._launch()
            result.append(dataclasses.replace(spec, env={**spec.env, **host}, command=command))
        return result

    def lease(self, name: str, keep_alive: float) -> Future[None]:
        """Make these hosts a job named ``name`` that outlives this controller, as
        ``host_mesh(name=..., keep_alive=...)`` does (docs/leases.md): for host meshes
        made otherwise, such as the host meshes of ``actormesh.job``'s ``state()``.

        Lease the hosts before spawning on them: the process and actor meshes spawned
        afterwards are the ones ``actormesh.attach(name)`` gives back. A later
        ``attach_to_workers`` (and so a re-run's ``job.state()``) that dials the same
        worker loops attaches to the job instead of waiting for the loops.

        Raises:
            TypeError: ``name`` is not a str.
            ValueError: ``keep_alive`` is not a positive number; ``name`` is not a job
                name, or a running job's; the mesh is ``this_host()``, a slice, leased
                already, or has processes spawned on it.
        """
        check_lease(name, keep_alive)
        hosts = self._hosts
        links = hosts.links
        if any(link is None for link in links):
            raise ValueError("this_host() cannot be leased: its processes are this one's")
        if len(self._shape.ranks) != len(links):
            raise ValueError("lease the whole host mesh, not a slice of it")
        if hosts.job is not None:
            raise ValueError(f"these hosts are leased already, as job {hosts.job.name!r}")
        if hosts.stopped:
            raise ValueError("these hosts are shut down")
        if hosts.procs:
            raise ValueError(
                "lease the hosts before spawning processes on them (the meshes spawned "
                "since the lease are the ones attach() gives back)"
            )
        runtime = Runtime.get()
        agents = [link for link in links if link is not None]
        workers = getattr(hosts.allocator, "workers", ())

        async def start() -> None:
            hosts.job = await start_lease(runtime, name, float(keep_alive), agents, workers)
            hosts.job.note_hosts(self)

        return from_concurrent(runtime, runtime.submit(start()))

    def shutdown(self) -> Future[None]:
        """End the host agents of this mesh, and with them every process they started.

        ``this_host()`` has no agent to end: its processes stop with their meshes.
        """
        hosts = self._hosts
        runtime = Runtime.get()
        links = [link for link in hosts.links if link is not None]
        if hosts.stopped or not links:
            hosts.stopped = hosts.stopped or bool(links)
            return from_concurrent(runtime, runtime.submit(_nothing()))
        hosts.stopped = True
        grace = runtime.config.stop_grace
        if hosts.job is not None:
            hosts.job.ended()

        async def stop() -> None:
            # Their processes first: ending with the hosts is no failure of theirs.
            for procs in hosts.procs:
                await procs.stop()
            await hosts.allocator.stop_hosts(runtime, links, grace)

        return from_concurrent(runtime, runtime.submit(stop()))

    def stop(self) -> Future[None]:
        """The same as ``shutdown()``."""
        return self.shutdown()

    async def __aenter__(self) -> HostMesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def __enter__(self) -> HostMesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown().get()

    def __repr__(self) -> str:
        where = ", ".join(
            "this host" if link is None else link.hostname
            for link in (self._hosts.links[rank] for rank in self._shape.ranks)
        )
        return f"<HostMesh {self._shape} on {where}>"


async def _nothing() -> None:
    return None


async def _launch(
    runtime: Runtime,
    links: Sequence[AgentLink | None],
    specs: Sequence[ProcessSpec],
    per_host: int,
    bootstrap: Callable[[], Any] | None,
) -> list[ChildProcess]:
    """Start ``specs`` host by host (``per_host`` each, in order), all hosts at once."""
    groups = [specs[i * per_host : (i + 1) * per_host] for i in range(len(links))]
    tree = runtime.host_agents.one_tree(links)
    started: Sequence[Sequence[ChildProcess] | BaseException]
    if tree is not None:  # one request per child of the controller (_hosts/_subtree.py)
        workers = [_worker_specs(group) for group in groups]
        started = await runtime.host_agents.start_relayed_tree(
            tree, [(link, group) for link, group in zip(links, workers) if link is not None]
        )
    else:
        started = await asyncio.gather(
            *(_start_on(runtime, link, group) for link, group in zip(links, groups)),
            return_exceptions=True,
        )
    children = [c for group in started if not isinstance(group, BaseException) for c in group]
    failures = [group for group in started if isinstance(group, BaseException)]
    try:
        if failures:
            raise failures[0]
        if bootstrap is not None:
            await prepare(
                runtime, children, ProcessSetup(bootstrap=bootstrap), runtime.config.spawn_timeout
            )
    except BaseException:
        await runtime.stop_processes(children, grace=0.0)
        raise
    return children


async def _start_on(
    runtime: Runtime, link: AgentLink | None, specs: Sequence[ProcessSpec]
) -> list[ChildProcess]:
    if link is None:
        return await runtime.start_processes(
            [(s.key, s.rank, dict(s.env)) for s in specs], [s.command for s in specs]
        )
    return list(await runtime.host_agents.start_relayed(link, _worker_specs(specs)))


def _worker_specs(specs: Sequence[ProcessSpec]) -> list[WorkerSpec]:
    return [WorkerSpec(s.key, s.rank, dict(s.env), s.command) for s in specs]


_THIS_HOST = _Hosts([None], LocalAllocator())


def this_host() -> HostMesh:
    """The host this code runs on, as a host mesh without dimensions.

    In a process spawned on a host mesh with a bootstrap command
    (``with_python_executable``), it carries that command.
    """
    return HostMesh(_THIS_HOST, Shape((), (), (0,)), host_bootstrap())


def this_proc() -> ProcMesh:
    """The process this code runs in, as a one-process mesh without dimensions.

    Actors spawned on it live in this process (the controller's, or an actor's own).
    Stopping it stops those actors, never the process.
    """
    from ._proc_mesh import own_process

    return own_process(Runtime.get())


class _Attached:
    """The "allocator" of hosts this process attached to: it only lets them go.

    ``workers``: the worker loops' addresses, when the hosts came from them.
    """

    def __init__(self, workers: Sequence[str] = ()) -> None:
        self.workers = tuple(workers)

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        for link in links:
            link.retire()  # shut down, not just left: their worker loops end too
        await runtime.stop_processes([link.process for link in links], grace)


def attach_to_workers(
    *,
    workers: Sequence[str | Future[str]],
    ca: Any = None,
    private_key: Any = None,
    name: str | None = None,
) -> HostMesh:
    """Monarch's ``attach_to_workers``: a host mesh of agents that wait at ``workers``.

    Each address is a process running ``run_worker_loop_forever(address=...)``, in any
    of its forms (``tcp://HOST:PORT``, ``ipc://PATH``, ``DIAL@BIND``: dialled at
    ``DIAL``, a proc id in front); a future gives its address when it resolves. This
    process dials each one (a worker still starting is waited for, up to
    ``Config.spawn_timeout``), and the agents become this mesh's hosts, dimension
    ``hosts``. ``shutdown()`` ends them.

    Worker loops whose hosts are held by a leased job (``HostMesh.lease``, started by
    an earlier controller from these very addresses) serve that job, not a new owner:
    this attaches to the job instead (``actormesh.attach``) and returns its host mesh,
    whose process and actor meshes ``actormesh.attach(name)`` gives back.

    Both sides prove the job's secret (``ACTORMESH_SECRET``, set on both). With
    ``ca="trust_all_connections"`` and no secret given to this controller, the workers
    are attached unauthenticated (they were started with the same ``ca``) and are handed
    the job's secret, sealed against eavesdroppers. ``private_key`` and other ``ca``
    values (Monarch's TLS files) are not used.

    Raises:
        ValueError: an address is not a worker address, or names nothing to dial.
        AuthenticationError: a worker and this controller disagree on the secret.
        TimeoutError: nothing listened at an address in time.
    """
    del private_key, name
    from .._hosts import dial_agent

    runtime = Runtime.get()
    _supervision.install(runtime)
    addresses = [w.get() if isinstance(w, Future) else w for w in workers]
    dials = [parse_worker_address(a).dial.address for a in addresses]
    leased = _leased_hosts(addresses)
    if leased is not None:
        return leased
    trust_all = ca == "trust_all_connections" and runtime.config.secret is None
    timeout = runtime.config.spawn_timeout

    async def attach() -> HostMesh:
        links = await asyncio.gather(
            *(
                runtime.host_agents.attach_agent(
                    dial,
                    functools.partial(
                        dial_agent, address, runtime.secret, trust_all=trust_all, timeout=timeout
                    ),
                )
                for address, dial in zip(addresses, dials, strict=True)
            )
        )
        shape = Shape.from_dims(("hosts",), (len(links),))
        return HostMesh(_Hosts(list(links), _Attached(addresses)), shape)

    result: HostMesh = runtime.submit(attach()).result(timeout * 2 + 30)
    return result


def _leased_hosts(workers: list[str]) -> HostMesh | None:
    """The host mesh of the leased job that holds these worker loops, attached to; None
    when no running job does (a record left by a job that ended is dropped)."""
    record = leased_at(workers)
    if record is None:
        return None
    from ._attach import attach  # (_attach builds host meshes: imported when needed)

    try:
        return attach(record.name).hosts
    except LookupError:  # its lease ran out, or it was killed: the loops are free
        log.info("the leased job %r of these worker loops is gone", record.name)
        return None


def host_mesh(
    hosts: int,
    *,
    allocator: Allocator | None = None,
    name: str | None = None,
    keep_alive: float | None = None,
    fan_out: int | None = None,
) -> Future[HostMesh]:
    """A mesh of ``hosts`` hosts, each with a host agent, from ``allocator``.

    ``ExternalAllocator``: agents started by a cluster launcher with ``actormesh host
    --join HOST:PORT`` join here. ``RayAllocator``: one agent per Ray node. The default,
    ``LocalAllocator``: ``hosts`` agents on this host, each standing for a host (to try
    a program written for several hosts on one). The mesh's dimension is ``hosts``;
    ``shutdown()`` ends the agents and their processes.

    With ``keep_alive`` (seconds) the hosts are a job named ``name`` that outlives this
    controller (docs/leases.md): when this process exits or dies, the agents, their
    processes and their actors run on for up to ``keep_alive`` seconds with nobody
    attached, and ``actormesh.attach(name)`` in another process gives back the meshes
    spawned on them, by name. ``shutdown()`` ends the job.

    With more hosts than ``fan_out`` (default ``Config.fan_out``, 16) the agents form a
    tree of that fan-out: a cast leaves this process as at most ``fan_out`` frames, each
    agent forwards it to its children, and the replies of a call (or the values of a
    reducing one) come back merged per subtree (docs/multihost.md).

    Raises:
        TypeError: the allocator cannot start host agents; ``name`` is not a str.
        ValueError: ``hosts`` is not a positive int; ``fan_out`` is not an int >= 2;
            ``keep_alive`` is not a positive number, or is given without a ``name`` (or a
            ``name`` that is not a job name: letters, digits, ``.``, ``_``, ``-``, or
            the name of a job that runs).
    """
    if allocator is None:
        allocator = LocalAllocator()
    if not isinstance(allocator, HostAllocator):
        raise TypeError(
            f"{allocator!r} cannot start host agents: it is not a HostAllocator "
            "(it has no start_hosts()/stop_hosts())"
        )
    start_hosts = allocator.start_hosts
    if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
        raise ValueError(f"hosts must be a positive int, not {hosts!r}")
    if keep_alive is not None:
        check_lease(name, keep_alive)
    if fan_out is not None:
        check_fan_out(fan_out)
    runtime = Runtime.get()
    _supervision.install(runtime)
    k = runtime.config.fan_out if fan_out is None else fan_out

    async def start() -> HostMesh:
        links: list[AgentLink] = await start_hosts(runtime, hosts)
        try:
            await runtime.host_agents.form_tree(links, k)
        except BaseException:
            await allocator.stop_hosts(runtime, links, 0.0)
            raise
        mesh = HostMesh(_Hosts(list(links), allocator), Shape.from_dims(("hosts",), (hosts,)))
        if keep_alive is not None and name is not None:
            try:
                mesh._hosts.job = await start_lease(runtime, name, float(keep_alive), links)
            except BaseException:
                await allocator.stop_hosts(runtime, links, 0.0)
                raise
            mesh._hosts.job.note_hosts(mesh)
        return mesh

    return from_concurrent(runtime, runtime.submit(start()))
