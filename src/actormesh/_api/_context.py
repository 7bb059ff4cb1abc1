"""Who is running: the current actor's identity, for ``current_rank()`` and friends.

A context variable holds the running actor (set by the actor layer around ``__init__``
and every endpoint, on the loop and on the actor's thread alike). Outside any actor, in the
controller, the rank is the single point of an empty shape.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from .._core._mailbox import CURRENT_MESSAGE
from .._shape import Point

__all__ = ["ActorIdentity", "cancelled", "current_actor", "current_rank", "current_size"]


@dataclass(frozen=True)
class ActorIdentity:
    """The running actor: its mesh name, its coordinates, and a handle on its own mesh."""

    mesh_name: str
    point: Point
    mesh: Any = None


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


def current_rank() -> Point:
    """Coordinates of the calling actor in its mesh.

    The result has ``.rank`` (the flat rank) and is a mapping of dimension to index, so
    ``other_mesh.slice(**current_rank())`` selects the peer with the same coordinates.
    Outside an actor it is the one point of an empty shape (rank 0, no dimensions).
    """
    identity = _CURRENT.get()
    return identity.point if identity is not None else _CONTROLLER_POINT


def current_size() -> dict[str, int]:
    """Sizes of the calling actor's mesh, by dimension (empty outside actors)."""
    return dict(current_rank().extent)


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
