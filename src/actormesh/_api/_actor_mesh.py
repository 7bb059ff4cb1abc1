"""``ActorMesh``: a handle on a group of actors with named dimensions.

A handle is a value: slicing returns a new handle on a subset, pickling sends the handle
to another process (an actor can then call the mesh directly, process to process). The
mutable facts about the mesh (stopped, dead ranks, load) live in its ``MeshState``.
Endpoints are attributes: ``mesh.step`` is the endpoint ``step`` bound to this handle.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from .._exceptions import ActorDiedError
from .._hosts import Runtime
from .._pure import Affinity, ChoosePolicy, pack, policy_from, unpack
from .._shape import Point, Shape, Shaped, pack_ranks
from ._actor import missing_endpoint
from ._adverbs import Adverbs
from ._choose import ChooseSettings, WhenFull
from ._endpoint import Endpoint, EndpointOptions, NotAnEndpoint
from ._future import Future, resolved
from ._mesh_state import DEFAULT_STOP_REASON, MeshState, state_of
from ._requests import fail_calls_to_stopped
from ._stopping import stop_mesh_in

if TYPE_CHECKING:
    from .._observe import Stacks

__all__ = ["ActorMesh", "MeshRef"]

T = TypeVar("T")
A = TypeVar("A")


@dataclass(frozen=True)
class MeshRef:
    """What any process needs to call a mesh: identity, endpoints, and where each rank is.

    Attributes:
        mesh_id: unique id of the mesh.
        name: the name given at spawn.
        class_name: the actor class' qualified name, for messages.
        endpoints: the class' endpoints and their options.
        labels: dimension names of the whole mesh.
        sizes: dimension sizes of the whole mesh.
        paths: for each root rank, the socket path of the process hosting it.
    """

    mesh_id: str
    name: str
    class_name: str
    endpoints: dict[str, EndpointOptions]
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    paths: tuple[str, ...]

    @functools.cached_property
    def _packed_paths(self) -> tuple[str, ...] | bytes:
        # Made once: a large mesh's reference is pickled with every call that carries it.
        return pack(self.paths)

    def __reduce__(self) -> tuple[Any, ...]:
        fields = (self.mesh_id, self.name, self.class_name, self.endpoints, self.labels)
        return (_mesh_ref, (*fields, self.sizes, self._packed_paths))


def _mesh_ref(
    mesh_id: str,
    name: str,
    class_name: str,
    endpoints: dict[str, EndpointOptions],
    labels: tuple[str, ...],
    sizes: tuple[int, ...],
    paths: tuple[str, ...] | bytes,
) -> MeshRef:
    """A mesh reference sent by another process (its paths perhaps packed: ``_pure._packed``)."""
    return MeshRef(mesh_id, name, class_name, endpoints, labels, sizes, unpack(paths))


class ActorMesh(Shaped, Generic[T]):
    """A group of actors of one class; returned by ``ProcMesh.spawn`` and ``actor_mesh()``.

    Endpoints are reached as attributes (``mesh.step.call(x)``). Slicing
    (``mesh.slice(dp=0)``, ``mesh[1, :]``), ``split``, ``flatten`` and ``rename`` return
    handles on parts of the same actors.

    In the Ray ActorMesh style, ``ActorMesh(Cls, args, kwargs, shape=4)`` starts a process
    per actor and returns the ready mesh, blocking until it is (the options are those of
    `actor_mesh`, which is the same without blocking: ``await actor_mesh(...)``). The
    mesh built this way owns its processes: ``stop()`` ends them.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ActorMesh[Any]:
        if args and isinstance(args[0], MeshRef):
            return super().__new__(cls)
        from ._actor_group import actor_mesh

        mesh: ActorMesh[Any] = actor_mesh(*args, **kwargs).get()
        return mesh  # already built: __init__ below leaves it as it is

    @overload
    def __init__(
        self,
        ref: MeshRef,
        shape: Shape,
        actor_class: type | None = None,
        settings: ChooseSettings | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: ActorMesh[A],
        ref: type[A],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        shape: int | Sequence[int] | Mapping[str, int],
        name: str | None = None,
        env: Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None = None,
        cpus_per_actor: int | None = None,
        gpus_per_actor: int | None = None,
        resources_per_actor: Mapping[str, float] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        choose: ChoosePolicy | str | None = None,
        max_in_flight: int | None = None,
        when_full: WhenFull = "wait",
    ) -> None: ...
    def __init__(self, ref: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(ref, MeshRef):
            return  # the Ray-style form: __new__ returned a mesh built by actor_mesh()
        self._setup(ref, *args, **kwargs)

    def _setup(
        self,
        ref: MeshRef,
        shape: Shape,
        actor_class: type | None = None,
        settings: ChooseSettings | None = None,
    ) -> None:
        self._ref = ref
        self._shape: Shape = shape
        self._class: type | None = actor_class
        self._settings: ChooseSettings = settings or _DEFAULT_SETTINGS
        self._state: MeshState = state_of(ref.mesh_id, ref.name, ref.paths)
        if self._state.ref is None:
            self._state.ref = ref
        self._adverbs = Adverbs(self)
        self._bound: dict[str, Endpoint[Any, Any]] = {}
        self._route_cache: list[tuple[str, tuple[int, ...]]] | None = None
        self._view_cache: tuple[Any, ...] | None = None

    # -- endpoints ----------------------------------------------------------------------

    def __getattr__(self, name: str) -> Endpoint[Any, Any]:
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        bound = self._bound.get(name)
        if bound is None:
            options = self._ref.endpoints.get(name)
            if options is None:
                if callable(getattr(self._class, name, None)):
                    # A plain method: usable through as_endpoint(), refused otherwise.
                    return NotAnEndpoint(self, name)  # type: ignore[return-value]
                raise missing_endpoint(self._ref.class_name, name, self._ref.endpoints, self._class)
            bound = self._bound[name] = Endpoint._for_mesh(name, options, self)
        return bound

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._ref.endpoints})

    # -- shape --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The name given at spawn."""
        return self._ref.name

    @property
    def initialized(self) -> Future[None]:
        """Resolves once every actor of the mesh is built; fails with ``ActorInitError``
        if an ``__init__`` raised (then the mesh's actors are dropped)."""
        spawned: Future[None] | None = self._state.initialized
        return spawned if spawned is not None else resolved(None)

    def __await__(self) -> Generator[Any, None, ActorMesh[T]]:
        """``await procs.spawn(...)``: the mesh, once every actor is built."""
        yield from self.initialized.__await__()
        return self

    def _view(self, shape: Shape) -> ActorMesh[T]:
        return ActorMesh(self._ref, shape, self._class, self._settings)

    _with_shape = _view

    def _message_view(self) -> tuple[Any, ...] | None:
        """What a call must tell its actors of this handle's shape so each knows its
        place in it (``current_rank()``): nothing for the whole mesh as spawned."""
        view = self._view_cache
        if view is None:
            shape, ref = self._shape, self._ref
            whole = (
                shape.labels == ref.labels
                and shape.sizes == ref.sizes
                and shape.ranks == tuple(range(len(ref.paths)))
            )
            packed = pack_ranks(shape.sizes, shape.ranks)
            view = self._view_cache = () if whole else (shape.labels, shape.sizes, packed)
        return view or None

    def _routes(self) -> list[tuple[str, tuple[int, ...]]]:
        """``(process path, ranks hosted there)`` for this handle's actors, in rank order."""
        routes = self._route_cache
        if routes is None:
            grouped: dict[str, list[int]] = {}
            for rank in self._shape.ranks:
                grouped.setdefault(self._ref.paths[rank], []).append(rank)
            routes = self._route_cache = [(p, tuple(r)) for p, r in grouped.items()]
        return routes

    def _policy(self, ep: Endpoint[Any, Any]) -> ChoosePolicy:
        """The choose policy of ``ep`` here: this handle's, else the endpoint's, else the
        mesh's. A policy given by name is one object per mesh and endpoint in this process,
        shared by every handle, so a round-robin cursor survives ``with_policy`` and slices.
        """
        spec = self._settings.policy
        if spec is None:
            spec = ep.options.choose if ep.options.choose is not None else self._state.choose
        if not isinstance(spec, str):
            return policy_from(spec)
        policy: ChoosePolicy = self._state.named_policy(spec, ep.name, policy_from)
        return policy

    def _affinity(self) -> Affinity:
        """The policy for calls with a routing key when the handle's policy ignores keys."""
        policy = self._state.named_policy("affinity", "", policy_from)
        assert isinstance(policy, Affinity)
        return policy

    def with_policy(
        self,
        policy: ChoosePolicy | str | None = None,
        *,
        max_in_flight: int | None = None,
        when_full: WhenFull | None = None,
    ) -> ActorMesh[T]:
        """A handle on the same actors whose ``choose`` calls route by these settings.

        Args:
            policy: ``"power_of_two"`` (the default), ``"least_loaded"``, ``"random"``,
                ``"round_robin"``, ``"work_queue"``, ``"affinity"``, or a policy object
                (any object with ``choose(candidates, in_flight, key)``). ``None`` keeps
                the current one. A name gives each endpoint its own policy object.
            max_in_flight: calls a rank may have in flight (counted by this process)
                before ``choose`` passes it over; ``None`` keeps the current bound.
            when_full: when every live rank is at the bound, ``"wait"`` queues the call
                until one has room (pull-based), ``"error"`` raises ``MeshBusyError``.

        Settings are per handle: slices of the new handle keep them; pickled copies
        sent to other processes do not.
        """
        current = self._settings
        settings = ChooseSettings(
            policy if policy is not None else current.policy,
            max_in_flight if max_in_flight is not None else current.max_in_flight,
            when_full if when_full is not None else current.when_full,
        )
        return ActorMesh(self._ref, self._shape, self._class, settings)

    # -- load and lifetime --------------------------------------------------------------

    def stats(self) -> dict[int, dict[str, Any]]:
        """Per root rank, as seen by this process: in flight, completed, failed, latency."""
        return self._state.stats()

    def stacks(self, timeout: float = 5.0, native: bool = False) -> Future[Stacks]:
        """What each actor of this handle is doing now: its Python stacks (the thread
        running its endpoint marked, the coroutines an ``async`` one awaits, threads
        its code started), with ranks that share a stack grouped; ``print()`` it.

        A process that cannot answer within ``timeout`` seconds (its event loop blocked
        by a C call holding the GIL, say) is reported as silent. ``native``: every
        thread's C and Python frames and the GIL's holder instead, read by py-spy
        (``actormesh[native]``) from outside the process, so a silent one is shown too
        (processes on this host only).
        """
        from .._observe import mesh_stacks
        from ._future import from_concurrent

        runtime = Runtime.get()
        for path, _ in self._routes():
            with contextlib.suppress(ActorDiedError):
                runtime.connection(path)  # dialled here: the loop thread never dials
        ranks = list(self._shape.ranks)
        inner = runtime.submit(mesh_stacks(runtime, self._ref, ranks, timeout, native))
        return from_concurrent(runtime, inner)

    def stop(self, reason: str = DEFAULT_STOP_REASON) -> Future[None]:
        """Drop every actor of this mesh; pending calls fail (their error, and those of
        later calls, say ``reason``).

        The processes of a ``ProcMesh`` stay up for other meshes; those that
        ``actor_mesh()`` started for this mesh alone stop with it.
        """
        state = self._state
        state.note_stop(reason)
        if state.job is not None:
            state.job.forget_actors(self._ref.mesh_id)
        if state.owned is not None:
            state.stopped = True
            fail_calls_to_stopped(state)
            return state.owned.stop(reason)  # type: ignore[no-any-return]
        future: Future[None] = Future._new(Runtime.get().in_loop_thread)
        if state.stopped:
            future._set_result(None)
            return future
        state.stopped = True
        fail_calls_to_stopped(state)
        routes = [(path, ranks[0]) for path, ranks in self._all_routes()]
        return stop_mesh_in(Runtime.get(), self._ref.mesh_id, routes)

    def _all_routes(self) -> list[tuple[str, tuple[int, ...]]]:
        return self._view(
            Shape(self._ref.labels, self._ref.sizes, tuple(range(len(self._ref.paths))))
        )._routes()

    async def __aenter__(self) -> ActorMesh[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> ActorMesh[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop().get()

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorMesh, (self._ref, self._shape))

    def __repr__(self) -> str:
        return f"<ActorMesh '{self._ref.name}' of {self._ref.class_name} {self._shape}>"


_DEFAULT_SETTINGS = ChooseSettings()
