"""``ProcMesh`` and ``proc_mesh()``: groups of worker processes with named dimensions.

A process mesh is the place actors live: ``await procs.spawn(name, Cls, *args)`` builds one
actor of ``Cls`` in every process and returns the actor mesh. Stopping a process mesh
stops its processes (and so every actor in them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, TypeVar, cast

from .._core import dumps, headers
from .._exceptions import ActorClassError, ActorInitError, MeshStoppedError
from .._hosts import ChildProcess, ProcessSetup, Runtime, Status, prepare
from .._pure import pack, unpack
from .._shape import Point, Shape, Shaped, ValueMesh
from . import _restart, _supervision
from ._actor import Actor, SpawnSpec, endpoint_table
from ._actor_mesh import ActorMesh, MeshRef
from ._allocator import Allocator, LocalAllocator, ProcessSpec
from ._context import adopt, context
from ._future import Future, from_concurrent, resolved
from ._leased_job import actors_key
from ._mesh_state import DEFAULT_STOP_REASON, Failure, all_states
from ._requests import _Gather, fail_calls_to_stopped
from ._stopping import stop_mesh_in

__all__ = ["ProcMesh", "managed", "own_process", "proc_mesh", "process_specs"]

T = TypeVar("T")


class _Processes:
    """The processes of one process mesh, shared by all its slices.

    ``owned`` is False in a copy of a process mesh that another process sent (a
    ``ProcMesh`` pickles as a reference to the same processes): actors may be spawned on
    it from there, but only its owner, the process that started it, stops it.
    """

    def __init__(
        self,
        name: str,
        children: Sequence[ChildProcess | _ProcessRef],
        allocator: Allocator | None = None,
        owned: bool = True,
    ) -> None:
        self.name = name
        self.children = list(children)
        self.allocator: Allocator = allocator or LocalAllocator()
        self.owned = owned
        self.stopped = False
        self.meshes: list[str] = []
        self.restarter: _restart.Restarter | None = None
        # The host mesh it was spawned on and the processes per host (spawn_procs).
        self.hosts: tuple[Any, int] | None = None
        # The leased job it belongs to, which writes down its actor meshes (_leased_job).
        self.job: Any = None


class _ProcessRef:
    """A process of a process mesh that another process started (see ``_Processes``)."""

    local = False  # its pid may mean nothing here
    restart_note: str | None = None

    def __init__(self, key: str, rank: int, listen_path: str, pid: int) -> None:
        self.key = key
        self.rank = rank
        self.listen_path = listen_path
        self.pid = pid


class ProcMesh(Shaped):
    """Worker processes with named dimensions; returned by ``proc_mesh()``.

    A process mesh travels in calls (as Monarch's does): the actor that receives it can
    spawn actors on the same processes, which then belong to that actor.
    """

    def __init__(self, processes: _Processes, shape: Shape, per_process: int = 1) -> None:
        self._processes = processes
        self._shape = shape
        # Points per process (see repeat()): point rank r lives in process r // per_process.
        self._per_process = per_process

    def _with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._processes, shape, self._per_process)

    def __reduce__(self) -> tuple[Any, ...]:
        processes = self._processes
        children = tuple(
            (child.key, child.rank, child.listen_path, child.pid) for child in processes.children
        )
        return (_received, (processes.name, pack(children), self._shape, self._per_process))

    def repeat(self, **dims: int) -> ProcMesh:
        """This mesh with each process repeated along new (last) dimensions.

        ``procs.repeat(actors=16).spawn("w", W)`` builds 16 actors of ``W`` in every
        process, on a mesh of dimensions ``{**procs.sizes, "actors": 16}``: many actors
        share a process (and its memory and threads) but keep their own mailboxes.
        """
        if self._per_process != 1 or len(self._shape) != math.prod(self._shape.sizes):
            raise ValueError("repeat() applies to a whole process mesh, before slicing")
        count = math.prod(dims.values())
        shape = Shape.from_dims((*self._shape.labels, *dims), (*self._shape.sizes, *dims.values()))
        ranks = tuple(root * count + j for root in self._shape.ranks for j in range(count))
        return ProcMesh(self._processes, Shape(shape.labels, shape.sizes, ranks), count)

    def spawn(self, name: str, actor_class: type[T], /, *args: Any, **kwargs: Any) -> T:
        """Build one ``actor_class(*args, **kwargs)`` in every process of this mesh.

        Returns the ``ActorMesh`` at once (typed as the actor class, so endpoints
        type-check); calls made on it right away wait for the actors to be built.
        ``await mesh`` or ``mesh.initialized.get()`` waits for every ``__init__``: if one
        raised, that fails with ``ActorInitError``; the failure of those ranks also goes
        to the mesh's owner (see ``_supervision``), calls that include them raise it, and
        a slice without them serves on.
        """
        if self._processes.stopped:
            raise MeshStoppedError(
                f"process mesh '{self._processes.name}' was stopped (`ProcMesh` has already "
                "been stopped)"
            )
        if not isinstance(name, str) or not name:
            raise TypeError(f"spawn needs a mesh name (a non-empty str) first, got {name!r}")
        if not (isinstance(actor_class, type) and issubclass(actor_class, Actor)):
            raise ActorClassError(f"spawn needs a subclass of actormesh.Actor, got {actor_class!r}")
        job = self._processes.job
        if job is not None:
            job.claim(actors_key(name), "actor mesh")
        labels, sizes = self._shape.labels, self._shape.sizes
        children = self._processes.children
        ref = MeshRef(
            mesh_id=f"{name}-{uuid.uuid4().hex[:12]}",
            name=name,
            class_name=f"{actor_class.__module__}.{actor_class.__qualname__}",
            endpoints=endpoint_table(actor_class),
            labels=labels,
            sizes=sizes,
            paths=tuple(
                children[root // self._per_process].listen_path for root in self._shape.ranks
            ),
        )
        mesh: ActorMesh[T] = ActorMesh(ref, Shape.from_dims(labels, sizes), actor_class)
        adopt(mesh)  # an actor's meshes stop with it
        creator = context().actor_instance.as_creator()
        mesh._state.creator = creator
        _supervision.adopt(mesh._state)
        # Imported here: _observe reads this package's meshes, so importing it at load
        # time would make the two packages import each other.
        from .._observe import spawned

        spawned(mesh)  # actormesh top / stacks / debug see it
        spec = SpawnSpec(
            actor_class, args, kwargs, name, labels, sizes, mesh, proc_mesh=self, creator=creator
        )
        payload, buffers = dumps(spec)
        self._processes.meshes.append(ref.mesh_id)
        if self._processes.restarter is not None:
            self._processes.restarter.remember(mesh, spec)
        if job is not None:
            job.note_actors(mesh, actor_class, self)  # before the spawn: in order with it
        request = _Spawn(mesh)
        mesh._state.initialized = request.future
        # One parts list for every process: frames that share it go to each host agent as
        # one cast (a list per process would send the spec once per process, through
        # every agent above it: bytes that grow with the square of the hosts).
        parts = [payload, *buffers]
        request.send([(path, ranks, parts) for path, ranks in mesh._routes()])
        return mesh  # type: ignore[return-value]

    def stop(self, reason: str = DEFAULT_STOP_REASON) -> Future[None]:
        """Stop every process of this mesh (all of it, whichever slice this is); the
        errors of calls to its actors say ``reason``."""
        processes = self._processes
        runtime = Runtime.get()
        if not processes.owned:
            raise RuntimeError(
                f"process mesh '{processes.name}' was sent here from the process that "
                "started it, and only that process stops it (stop the actor meshes you "
                "spawned on it with their own stop())"
            )
        if processes.stopped:
            return from_concurrent(runtime, _done_future())
        processes.stopped = True
        if processes.job is not None:
            processes.job.forget_procs(self)
        if processes.restarter is not None:
            _restart.uninstall(processes.restarter)
        for state in all_states():
            if state.mesh_id in processes.meshes:
                state.note_stop(reason)
                state.stopped = True
                fail_calls_to_stopped(state)
        grace = runtime.config.stop_grace

        async def stopping() -> None:
            # The actors first, so each one's __cleanup__ runs, then the processes.
            await _stop_actors(runtime, processes, grace)
            owned = cast(list[ChildProcess], processes.children)  # (only owners stop)
            await processes.allocator.stop(runtime, owned, grace)

        return from_concurrent(runtime, runtime.submit(stopping()))

    async def logging_option(
        self,
        stream_to_client: bool = True,
        aggregate_window_sec: float | None = 3,
        level: int = logging.INFO,
    ) -> None:
        """Monarch's output settings for this mesh's processes.

        Args:
            stream_to_client: False drops what the processes print (by default it reaches
                the controller, prefixed with the actor and its coordinates).
            aggregate_window_sec: merge identical lines of large meshes arriving within
                this many seconds (``None``: never merge). It applies to the controller's
                output as a whole.
            level: the processes' root logging level.
        """
        runtime = Runtime.get()
        lines = runtime.output_lines
        if lines is not None:
            lines.set_window(aggregate_window_sec)
        setup = ProcessSetup(bootstrap=functools.partial(_log_settings, stream_to_client, level))
        children = self._processes.children
        await asyncio.wrap_future(
            runtime.submit(prepare(runtime, children, setup, runtime.config.spawn_timeout))
        )

    @property
    def initialized(self) -> Future[bool]:
        """A future of ``True``: the processes are up (``spawn_procs`` returned once they
        were), as Monarch's ``ProcMesh.initialized`` resolves."""
        return resolved(True)

    @property
    def host_mesh(self) -> Any:
        """The host of a one-process mesh (Monarch's ``proc_mesh.host_mesh``).

        Raises:
            NotImplementedError: the mesh has more than one process, as in Monarch.
        """
        if len(self._shape) != 1:
            raise NotImplementedError("host_mesh of a mesh of several processes")
        hosts = self._processes.hosts
        if hosts is None:
            from ._host_mesh import this_host

            return this_host()
        host_mesh, per_host = hosts
        process = self._shape.ranks[0] // self._per_process
        host_rank = host_mesh._shape.ranks[process // per_host]
        return host_mesh._with_shape(Shape((), (), (host_rank,)))

    async def __aenter__(self) -> ProcMesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> ProcMesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop().get()

    def __repr__(self) -> str:
        return f"<ProcMesh '{self._processes.name}' {self._shape}>"


def _received(
    name: str,
    children: tuple[tuple[str, int, str, int], ...] | bytes,
    shape: Shape,
    per_process: int,
) -> ProcMesh:
    """A process mesh sent by another process: a reference to the same processes (their
    table perhaps packed: ``_pure._packed``)."""
    table = unpack(children)
    processes = _Processes(name, [_ProcessRef(*child) for child in table], owned=False)
    return ProcMesh(processes, shape, per_process)


def _log_settings(stream_to_client: bool, level: int) -> None:
    # Runs in each process of the mesh (ProcessSetup): its logging level, and its output
    # sent nowhere when the caller does not want it.
    logging.getLogger().setLevel(level)
    if not stream_to_client:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            os.dup2(devnull, stream.fileno())
        os.close(devnull)


async def _stop_actors(runtime: Runtime, processes: _Processes, grace: float) -> None:
    """Stop every actor mesh spawned on ``processes`` (running each actor's
    ``__cleanup__``), waiting at most ``grace`` seconds for the processes to confirm."""
    if not processes.meshes:
        return
    where = [(child.listen_path, child.rank) for child in processes.children]
    stopped = [stop_mesh_in(runtime, mesh_id, where) for mesh_id in processes.meshes]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_all_of(stopped), grace)


async def _all_of(futures: Sequence[Future[None]]) -> None:
    for future in futures:
        await future


class _Spawn(_Gather):
    """Gathers each rank's construction. Any error fails the spawn's future; a rank whose
    ``__init__`` raised is a failure of the mesh, reported to its owner, and calls that
    include it raise its ``ActorInitError`` while the other ranks serve on."""

    def __init__(self, mesh: ActorMesh[Any]) -> None:
        super().__init__(mesh, "__init__")
        self.errors: dict[int, BaseException] = {}

    routed = False  # answers come back on the runtime's connection, which watches them

    def _header(self, ranks: tuple[int, ...], token: str | None = None) -> headers.Header:
        return headers.Spawn(self.req_id, self.ref.mesh_id, ranks)

    def _error(self, rank: int, error: BaseException) -> None:
        self.errors[rank] = error

    def _complete(self) -> None:
        if not self.errors:
            self.future._set_result(None)
            return
        # Recorded before anyone waiting hears of it, so a call made after sees it.
        # (A rank whose process died is reported as that death, by the runtime.)
        failed = {r: e for r, e in self.errors.items() if isinstance(e, ActorInitError)}
        self.state.init_errors.update(failed)
        for rank, error in failed.items():
            self.state.dead.setdefault(rank, f"its __init__ raised {error.cause_type}")
        for rank in sorted(failed):
            # One failure per rank, as Monarch reports them (and calls the hooks).
            failure = Failure(
                self.ref.name,
                (rank,),
                "init",
                failed[rank],
                _supervision.actor_name(self.state, rank),
                f"its __init__ raised: {failed[rank]}",
            )
            _supervision.report(self.state, failure)
        self.future._set_exception(self.errors[min(self.errors)])


def proc_mesh(
    shape: int | Sequence[int] | Mapping[str, int] | None = None,
    *,
    hosts: int | None = None,
    gpus: int | None = None,
    env: Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None = None,
    name: str = "procs",
    restart: _restart.RestartMode = "never",
    max_restarts: int = 3,
    restart_window: float = 60.0,
    allocator: Allocator | None = None,
    **dims: int,
) -> Future[ProcMesh]:
    """Start a mesh of worker processes (on this host, unless an allocator says otherwise).

    ``proc_mesh(gpus=4)``, ``proc_mesh(hosts=2, gpus=4)`` or ``proc_mesh({"dp": 2, "tp": 2})``:
    dimension names are free (``gpus`` is just a name on a machine without GPUs). Each
    process sees ``ACTORMESH_RANK`` and ``ACTORMESH_COORDS`` (JSON) in its environment.

    Args:
        shape: the dimensions as a mapping (or an int / tuple of sizes).
        hosts: size of a ``hosts`` dimension (first).
        gpus: size of a ``gpus`` dimension (after ``hosts``).
        env: extra environment variables for every process, or a function giving each
            process its own from its coordinates (``lambda point: {...}``).
        name: a label for output prefixes and messages.
        restart: ``"rank"`` replaces a process that dies by a new one at the same rank
            and rebuilds its actors there (``__init__`` with the same arguments, then
            ``__restore__``); ``"never"`` leaves the rank dead. See docs/faults.md.
        max_restarts: restarts allowed per rank within ``restart_window`` seconds; a death
            beyond that is reported to the owner like any other.
        restart_window: the sliding window of ``max_restarts``, in seconds.
        allocator: where the processes come from (`LocalAllocator`: subprocesses of this
            one, the default; see ``actormesh.allocators`` for Ray clusters and processes
            that join from other hosts).
        **dims: further named dimensions.
    """
    policy = _restart.RestartPolicy(restart, max_restarts, restart_window)
    allocator = allocator or LocalAllocator()
    if not isinstance(allocator, Allocator):
        raise TypeError(f"allocator must have start() and stop() coroutines, not {allocator!r}")
    if policy.mode != "never" and not isinstance(allocator, LocalAllocator):
        raise ValueError(
            f"restart={restart!r} needs processes this one starts on this host "
            f"(LocalAllocator), not {allocator!r}"
        )
    if shape is not None and (hosts is not None or gpus is not None or dims):
        raise TypeError("give the shape either as one mapping or as keyword dimensions, not both")
    if shape is None:
        named = {k: v for k, v in (("hosts", hosts), ("gpus", gpus)) if v is not None}
        named.update(dims)
        mesh_shape = Shape.of(named)
    else:
        mesh_shape = Shape.of(shape)
    runtime = Runtime.get()
    _supervision.install(runtime)
    specs = process_specs(mesh_shape, name, env)

    async def start() -> ProcMesh:
        children = await allocator.start(runtime, specs)
        return managed(runtime, name, children, allocator, mesh_shape, policy)

    return from_concurrent(runtime, runtime.submit(start()))


def process_specs(
    shape: Shape,
    name: str,
    env: Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None = None,
) -> list[ProcessSpec]:
    """One spec per point of ``shape``, with the environment every worker of it sees."""
    specs = []
    for index in range(len(shape)):
        point = shape.point(index)
        process_env = {
            **(env(point) if callable(env) else env or {}),
            "ACTORMESH_RANK": str(index),
            "ACTORMESH_COORDS": json.dumps(dict(point)),
            "ACTORMESH_WORLD_SIZE": str(len(shape)),
            "ACTORMESH_PROC_MESH": name,
        }
        specs.append(
            ProcessSpec(f"{name}-{uuid.uuid4().hex[:8]}-{index}", index, point, process_env)
        )
    return specs


def managed(
    runtime: Runtime,
    name: str,
    children: list[ChildProcess],
    allocator: Allocator,
    shape: Shape,
    policy: _restart.RestartPolicy,
) -> ProcMesh:
    """The process mesh of ``children`` (started), with its restart policy in force."""
    processes = _Processes(name, children, allocator)
    if policy.mode == "rank":
        processes.restarter = _restart.Restarter(runtime, processes, policy)
        _restart.install(runtime, processes.restarter)
    mesh = ProcMesh(processes, shape)
    adopt(mesh)  # (the spawning code's context: an actor's processes stop with it)
    return mesh


class _OwnProcess(ChildProcess):
    """This very process, as the one member of ``this_proc()``: never signalled."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        super().__init__(runtime.key, 0, runtime.address, Status(os.getpid()))  # type: ignore[arg-type]

    @property
    def listen_path(self) -> str:
        """This process' address now: dual once it listens where other hosts reach it."""
        return self._runtime.address

    @listen_path.setter
    def listen_path(self, value: str) -> None:
        pass  # always the runtime's

    def alive(self) -> bool:
        return True

    def signal_group(self, sig: int) -> None:
        pass  # stopping this_proc() stops its actors, never the process


class _OwnActors:
    """The "allocator" of ``this_proc()``: stopping it drops the actors spawned there."""

    def __init__(self, processes: _Processes) -> None:
        self._processes = processes

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        raise TypeError("this_proc() is the process already running")

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        conn = runtime.connection(runtime.listen_path)
        for mesh_id in self._processes.meshes:
            runtime.send(conn, headers.StopMesh(0, mesh_id), [])


_OWN: dict[int, ProcMesh] = {}


def own_process(runtime: Runtime) -> ProcMesh:
    """``this_proc()`` of ``runtime``'s process (one per runtime)."""
    mesh = _OWN.get(id(runtime))
    if mesh is None or mesh._processes.stopped:
        processes = _Processes("this_proc", [_OwnProcess(runtime)])
        processes.allocator = _OwnActors(processes)
        mesh = _OWN[id(runtime)] = ProcMesh(processes, Shape((), (), (0,)))
    return mesh


def _done_future() -> ConcurrentFuture[None]:
    done: ConcurrentFuture[None] = ConcurrentFuture()
    done.set_result(None)
    return done


_ = ValueMesh  # re-exported type used in docs
