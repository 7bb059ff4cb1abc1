"""``Actor``: the base class of user actors, and how a worker builds and runs one.

An actor class lists its endpoints (methods marked ``@endpoint``). When a mesh is spawned,
each worker receives a ``SpawnSpec`` (the class, pickled by value when it lives in
``__main__``, and the constructor arguments) and builds one instance per rank it hosts, on
the actor's own thread, inside a context that makes ``current_rank()`` answer.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import sys
import traceback
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._core import BuildOnLoop, EndpointKind
from .._exceptions import SYSTEM_ENDPOINT, ActorClassError, EndpointNotFoundError
from .._hosts import CURRENT_PREFIX
from .._shape import Point
from ._context import ActorIdentity, identity_in, set_current_actor
from ._endpoint import AS_ENDPOINT, Endpoint, EndpointOptions
from ._mesh_state import DEFAULT_STOP_REASON

if TYPE_CHECKING:
    from typing import Self

    from .._observe import Stacks
    from .._pure import ChoosePolicy
    from .._shape import Extent, Shape
    from ._future import Future

__all__ = ["Actor", "SpawnSpec", "endpoint_table", "missing_endpoint", "point_of"]


def _print_failure(what: str) -> None:
    """Write the exception being handled to stderr, after ``what`` failed while an actor
    was closing: nobody waits for its answer, and the ``actormesh`` logger has no handler
    in a worker, so without this the user would never see it (the worker's stderr comes
    to the controller's terminal)."""
    print(f"actormesh: {what} raised:", file=sys.stderr)
    traceback.print_exc(file=sys.stderr)


# Seconds an actor's close waits for each mesh it spawned to stop.
_CHILD_STOP_WAIT = 30.0

# Attributes of an actor mesh; an endpoint with one of these names could not be reached.
# tests/groups checks that this covers every public attribute of ActorMesh.
RESERVED_NAMES = frozenset(
    {
        "actor_class",
        "extent",
        "flatten",
        "initialized",
        "name",
        "rename",
        "shape",
        "size",
        "sizes",
        "slice",
        "split",
        "stacks",
        "stats",
        "stop",
        "with_policy",
    }
)

# Hooks an actor may define that the runtime calls through its mailbox (see _supervision).
HOOKS = frozenset({"__supervise__"})
# Seconds an async __cleanup__ may take when its actor is stopped.


class Actor:
    """Base class of actors. Mark the methods other processes may call with ``@endpoint``.

    ``__init__`` runs in the worker on the actor's own thread (it may block, e.g. to load a
    model); an exception there is raised, as ``ActorInitError``, by ``mesh.initialized``
    and by calls to the mesh. ``def`` endpoints
    run on that thread too, one message at a time; ``async def`` endpoints run on the
    worker's event loop, also one at a time unless marked ``concurrent=True``.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = set(endpoint_table(cls))
        clashes = sorted(RESERVED_NAMES & names)
        if clashes:
            raise ActorClassError(
                f"{cls.__qualname__} defines endpoint(s) {clashes}: each name collides with "
                "an attribute of actor meshes (mesh.slice, mesh.stop, ...); rename them"
            )
        private = sorted(name for name in names if name.startswith("_"))
        if private:
            raise ActorClassError(
                f"{cls.__qualname__} defines endpoint(s) {private} starting with '_': a mesh "
                "keeps its own state in such attributes, so they cannot be reached; rename them"
            )

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the actor's class, at DEBUG (Monarch's ``Actor.logger``);
        what it writes reaches the controller as the actor's other output does."""
        logger = logging.getLogger(type(self).__name__)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.DEBUG)
        return logger

    if TYPE_CHECKING:
        # How a *mesh* of this actor looks to a type checker: spawn() returns the class
        # type so endpoints type-check (mesh.step.call_one(x) -> Future[R]), and these are
        # the mesh operations next to them.
        @property
        def name(self) -> str: ...
        @property
        def shape(self) -> Shape: ...
        def size(self, dim: str | Sequence[str] | None = None) -> int: ...
        @property
        def sizes(self) -> dict[str, int]: ...
        @property
        def extent(self) -> Extent: ...
        @property
        def initialized(self) -> Future[None]: ...
        def __await__(self) -> Generator[Any, None, Self]: ...
        def slice(self, **dims: int | slice | range) -> Self: ...
        def __getitem__(self, key: Any) -> Self: ...
        def split(self, **dims: Any) -> Self: ...
        def flatten(self, label: str) -> Self: ...
        def rename(self, **names: str) -> Self: ...
        def stop(self, reason: str = DEFAULT_STOP_REASON) -> Future[None]: ...
        def stats(self) -> dict[int, dict[str, Any]]: ...
        def stacks(self, timeout: float = 5.0) -> Future[Stacks]: ...
        def with_policy(
            self,
            policy: ChoosePolicy | str | None = None,
            *,
            max_in_flight: int | None = None,
            when_full: Literal["wait", "error"] = "wait",
        ) -> Self: ...


def endpoint_table(cls: type) -> dict[str, EndpointOptions]:
    """The endpoints of an actor class (inherited ones included), by name."""
    table: dict[str, EndpointOptions] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Endpoint):
                table[name] = value.options
            elif name in table:
                del table[name]  # overridden by a plain attribute
    return table


def missing_endpoint(
    class_name: str, name: str, table: dict[str, EndpointOptions], cls: type | None
) -> EndpointNotFoundError:
    """The error for reaching ``name`` on a mesh whose class has no such endpoint."""
    if cls is not None and callable(getattr(cls, name, None)):
        return EndpointNotFoundError(
            f"'{name}' is a method of {class_name} but not an endpoint; "
            "mark it with @endpoint to call it through a mesh"
        )
    known = ", ".join(sorted(table)) or "none"
    return EndpointNotFoundError(f"{class_name} has no endpoint '{name}' (its endpoints: {known})")


class _ActorHost:
    """What the worker's runtime holds for one actor (the core's ``Hosted``)."""

    def __init__(
        self, instance: Any, table: dict[str, EndpointOptions], context: contextvars.Context
    ) -> None:
        self.instance = instance
        self.table = table
        self.context = context
        self.on_close: list[Callable[[], None]] = []

    def kind(self, endpoint: str) -> EndpointKind:
        options = self.table.get(endpoint)
        if options is None and endpoint.startswith(AS_ENDPOINT):
            method = getattr(self.instance, endpoint.removeprefix(AS_ENDPOINT))
            return EndpointKind.ASYNC if inspect.iscoroutinefunction(method) else EndpointKind.SYNC
        if options is None:
            if endpoint == SYSTEM_ENDPOINT:
                return EndpointKind.SYNC
            if endpoint in HOOKS:
                # Lifecycle hooks the runtime delivers in order with the actor's messages.
                hook = getattr(self.instance, endpoint)  # AttributeError: the actor has none
                return (
                    EndpointKind.ASYNC if inspect.iscoroutinefunction(hook) else EndpointKind.SYNC
                )
            raise missing_endpoint(
                type(self.instance).__qualname__, endpoint, self.table, type(self.instance)
            )
        return options.kind

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        options = self.table.get(endpoint)
        if options is None and endpoint == SYSTEM_ENDPOINT:
            fn, *rest = args
            return fn(self, *rest, **kwargs)
        if options is not None and options.explicit_port:
            from ._ports import explicit_port

            return getattr(self.instance, endpoint)(explicit_port(), *args, **kwargs)
        return getattr(self.instance, endpoint.removeprefix(AS_ENDPOINT))(*args, **kwargs)

    def close(
        self,
        error: BaseException | None = None,
        on_loop: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        # On the actor's thread, after its last message. First the actor's own
        # __cleanup__(error) (Monarch's hook: None on a stop; an async one on the actor's
        # loop), then the hooks added by system calls (a process group to destroy, say),
        # newest first; one failing must not keep the others from running or the actor
        # from being dropped.
        self._cleanup(error, on_loop)
        self._stop_children()
        while self.on_close:
            hook = self.on_close.pop()
            try:
                hook()
            except Exception:
                _print_failure(f"a close hook of actor {self._describe()}")
        self.instance = None

    def _describe(self) -> str:
        """The actor as its messages name it: class, mesh and coordinates."""
        identity = identity_in(self.context)
        where = "" if identity is None else f" of mesh '{identity.mesh_name}' at {identity.point}"
        return f"{type(self.instance).__qualname__}{where}"

    def _stop_children(self) -> None:
        # What the actor spawned stops with it, newest first (its actor meshes before the
        # process meshes they may live on); Monarch's recursive stop.
        identity = identity_in(self.context)
        children = identity.children if identity is not None else []
        while children:
            child = children.pop()
            try:
                child.stop().get(timeout=_CHILD_STOP_WAIT)
            except Exception:
                _print_failure(f"stopping {child!r} with its owner, actor {self._describe()},")

    def _cleanup(
        self, error: BaseException | None, on_loop: Callable[[Callable[[], Any]], Any] | None
    ) -> None:
        cleanup = getattr(self.instance, "__cleanup__", None)
        if cleanup is None:
            return
        try:
            if on_loop is not None and inspect.iscoroutinefunction(cleanup):
                on_loop(lambda: cleanup(error))
                return
            result = self.context.run(cleanup, error)
            if inspect.iscoroutine(result):
                if on_loop is None:
                    result.close()
                    return
                on_loop(lambda: result)
        except Exception:
            _print_failure(f"__cleanup__ of actor {self._describe()}")


@dataclass
class SpawnSpec:
    """What a worker needs to build the actors of a new mesh (pickled once per spawn).

    ``restore`` is set when a restarted process rebuilds its actors: after ``__init__``
    (same arguments), the actor's optional ``__restore__()`` runs, on the actor's thread,
    so it can reload what its predecessor saved.
    """

    cls: type
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    mesh_name: str
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    mesh: Any = None
    restore: bool = False
    proc_mesh: Any = None
    creator: Any = None

    def actor(self, rank: int) -> tuple[Callable[[], Any], str, dict[str, int]]:
        """``(factory, mesh name, coordinates)`` of the actor of this root rank."""
        point = _unravel(self.labels, self.sizes, rank)
        coords = dict(point)

        table = endpoint_table(self.cls)

        def build() -> _ActorHost:
            context = contextvars.copy_context()
            instance = context.run(self._construct, point)
            return _ActorHost(instance, table, context)

        if all(options.kind is not EndpointKind.SYNC for options in table.values()):
            # An async actor (Monarch's rule: not every endpoint a plain def) is built on
            # its loop's thread, where its endpoints run: thread-local state set in
            # __init__ is there for them.
            return (lambda: BuildOnLoop(build)), self.mesh_name, coords
        return build, self.mesh_name, coords

    def _construct(self, point: Point) -> Any:
        identity = ActorIdentity(self.mesh_name, point, self.mesh, self.proc_mesh, self.creator)
        set_current_actor(identity)
        CURRENT_PREFIX.set(f"[{self.mesh_name} {point.brief()}]")
        instance = self.cls(*self.args, **self.kwargs)
        hook = getattr(instance, "__restore__", None) if self.restore else None
        if hook is not None:
            result = hook()
            if inspect.iscoroutine(result):
                result.close()
                raise TypeError(f"{self.cls.__qualname__}.__restore__ must be a plain `def`")
        return instance


def point_of(ref: Any, rank: int) -> Point:
    """Coordinates of root rank ``rank`` of the mesh described by ``ref``."""
    return _unravel(ref.labels, ref.sizes, rank)


def _unravel(labels: tuple[str, ...], sizes: tuple[int, ...], rank: int) -> Point:
    coords = []
    for size in reversed(sizes):
        rank, index = divmod(rank, size)
        coords.append(index)
    return Point(labels, sizes, tuple(reversed(coords)))
