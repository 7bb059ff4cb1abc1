"""Who is running: the current actor's identity, for ``current_rank()`` and friends.

A context variable holds the running actor (set by the actor layer around ``__init__``
and every endpoint, on the loop and on the actor's thread alike). Outside any actor, in the
controller, the rank is the single point of an empty shape.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .._core import CURRENT_MESSAGE, CoreRuntime
from .._exceptions import ActorAborted
from .._shape import Point, view_shape

__all__ = [
    "ActorIdentity",
    "Context",
    "Creator",
    "Instance",
    "adopt",
    "cancelled",
    "context",
    "current_actor",
    "current_actor_name",
    "current_rank",
    "current_size",
    "identity_in",
    "qualified_name",
]


@dataclass(frozen=True)
class Creator:
    """Who spawned an actor (``context().actor_instance.creator``): the spawning actor's
    rank, mesh name and class, and who spawned it in turn (``None`` past the
    controller, whose name is ``"root"``)."""

    rank: Point
    name: str
    class_name: str | None
    creator: Creator | None = None

    def __repr__(self) -> str:
        return qualified_name(self)

    __str__ = __repr__


@dataclass(frozen=True)
class ActorIdentity:
    """The running actor: its mesh name, its coordinates, a handle on its own mesh, the
    process mesh it was spawned on, and who spawned it."""

    mesh_name: str
    point: Point
    mesh: Any = None
    proc_mesh: Any = None
    creator: Creator | None = None
    # The actor and process meshes it spawned: they stop with it (see ``adopt``).
    children: list[Any] = field(default_factory=list, compare=False)


_CURRENT: contextvars.ContextVar[ActorIdentity | None] = contextvars.ContextVar(
    "actormesh_current_actor", default=None
)
_CONTROLLER_POINT = Point((), (), ())


def current_actor() -> ActorIdentity | None:
    """The running actor, or ``None`` outside actors (the controller)."""
    return _CURRENT.get()


def set_current_actor(identity: ActorIdentity) -> None:
    """Install ``identity`` in the current context (the actor layer calls this)."""
    _CURRENT.set(identity)


def identity_in(context: contextvars.Context) -> ActorIdentity | None:
    """The actor whose identity ``context`` (an actor's own context) holds."""
    return context.get(_CURRENT)


def adopt(child: Any) -> None:
    """Make the running actor, if any, own ``child`` (an actor or process mesh it just
    spawned): stopping the actor stops it too, as Monarch stops what an actor owns."""
    identity = _CURRENT.get()
    if identity is not None:
        identity.children.append(child)


def current_rank() -> Point:
    """Coordinates of the calling actor in the mesh the message it handles was sent to.

    For a call to the whole mesh (and in ``__init__``) that is its place in its mesh;
    for a call to a slice, its place in that slice (``mesh.slice(gpus=1)``: no ``gpus``
    dimension), as Monarch's ``current_rank()`` is. ``context().actor_instance.rank`` is
    always the place in the whole mesh. The result has ``.rank`` (the flat rank) and is a
    mapping of dimension to index, so ``other_mesh.slice(**current_rank())`` selects the
    peer with the same coordinates. Outside an actor it is the one point of an empty
    shape (rank 0, no dimensions).
    """
    identity = _CURRENT.get()
    if identity is None:
        return _CONTROLLER_POINT
    message = CURRENT_MESSAGE.get()
    view = getattr(message, "view", None)
    if not view:
        return identity.point
    shape = view_shape(*view)
    return shape.point(shape.index_of_rank(identity.point.rank))


def current_size() -> dict[str, int]:
    """Sizes of the calling actor's mesh, by dimension (empty outside actors)."""
    return dict(current_rank().extent)


@dataclass(frozen=True)
class Instance:
    """The running actor (``context().actor_instance``).

    Attributes:
        rank: its place in its whole mesh.
        name: its mesh's name (``"root"`` in the controller).
        class_name: its class' module and qualified name (``None`` in the controller).
        actor_id: a name unique in the job.
        proc_id: the name of its process.
    """

    rank: Point
    name: str
    class_name: str | None
    actor_id: str
    proc_id: str
    spawned_on: Any = None
    creator: Creator | None = None

    def __repr__(self) -> str:
        # Monarch's qualified name: <root>.<module.Class name{'gpus': 0/2}>
        return qualified_name(self)

    __str__ = __repr__

    def abort(self, reason: str | None = None) -> NoReturn:
        """End this actor now, from one of its endpoints (Monarch's
        ``actor_instance.abort``): the call fails with `ActorFailedError`, the actor is
        dropped, and its spawner's supervision gets a failure that gives ``reason`` (by
        default "no reason provided").

        Raises:
            ActorAborted: always (a ``BaseException``: let it through).
        """
        raise ActorAborted(reason if reason is not None else "no reason provided")

    def as_creator(self) -> Creator:
        """This actor as the creator of the actors it spawns."""
        return Creator(self.rank, self.name, self.class_name, self.creator)

    @property
    def proc_mesh(self) -> Any:
        """The process mesh it was spawned on (``this_proc()`` in the controller):
        spawning there puts actors in the same processes."""
        if self.spawned_on is not None:
            return self.spawned_on
        from ._host_mesh import this_proc

        return this_proc()

    @property
    def proc(self) -> Any:
        """Its process, as a one-process mesh (``this_proc()``)."""
        from ._host_mesh import this_proc

        return this_proc()


@dataclass(frozen=True)
class Context:
    """Where the running code is: the actor, and the message it handles."""

    actor_instance: Instance
    message_rank: Point


def context() -> Context:
    """The running actor and its message's rank (the controller's, outside actors)."""
    identity = _CURRENT.get()
    runtime = CoreRuntime.current()
    proc_id = runtime.key if runtime is not None else "controller"
    if identity is None:
        instance = Instance(_CONTROLLER_POINT, "root", None, f"root@{proc_id}", proc_id)
        return Context(instance, _CONTROLLER_POINT)
    mesh = identity.mesh
    class_name = mesh._ref.class_name if mesh is not None else None
    mesh_id = mesh._ref.mesh_id if mesh is not None else identity.mesh_name
    actor_id = f"{mesh_id}[{identity.point.rank}]@{proc_id}"
    instance = Instance(
        identity.point,
        identity.mesh_name,
        class_name,
        actor_id,
        proc_id,
        identity.proc_mesh,
        identity.creator,
    )
    return Context(instance, current_rank())


def qualified_name(instance: Instance | Creator | None) -> str:
    """An actor's name with its creators', as Monarch writes it:
    ``<root>.<module.Class name{'gpus': 0/2}>``."""
    names = []
    while instance is not None:
        kind = "" if instance.class_name is None else f"{instance.class_name} "
        rank = str(instance.rank) if len(instance.rank) else ""
        names.append(f"<{kind}{instance.name}{rank}>")
        instance = instance.creator
    return ".".join(reversed(names))


def current_actor_name() -> str:
    """The running actor's unique name (``context().actor_instance.actor_id``)."""
    return context().actor_instance.actor_id


def cancelled() -> bool:
    """True when the caller of the running endpoint gave up on this call.

    Cancelling the caller's ``Future`` (or the task awaiting it), or its timeout running
    out, cancels an ``async def`` endpoint's task outright; a ``def`` endpoint cannot be
    interrupted, so it polls this instead and returns early::

        @endpoint
        def train(self, steps: int) -> int:
            for step in range(steps):
                if actormesh.cancelled():
                    return step
                ...

    Always False outside endpoints.
    """
    message = CURRENT_MESSAGE.get()
    return message is not None and message.cancelled
