"""Running library code inside the actors of a mesh, through the runtime's system endpoint.

Every hosted actor answers the endpoint ``SYSTEM_ENDPOINT`` (see ``_actor``) by calling
``fn(host, *args, **kwargs)`` on the actor's own thread, in order with its other messages.
Extensions such as ``actormesh.torch`` use it to set up process groups and move weights
without the user's actor class declaring any endpoint for it. ``fn`` must be importable
in the workers (a module-level function of an installed module) or picklable by value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .._core import EndpointKind
from .._exceptions import SYSTEM_ENDPOINT
from .._shape import ValueMesh
from ._endpoint import Endpoint, EndpointOptions
from ._future import Future

__all__ = ["ActorHost", "run_in_actors"]

R = TypeVar("R")

_OPTIONS = EndpointOptions(EndpointKind.SYNC)


class ActorHost(Protocol):
    """What a system function receives: the actor and a place for cleanup.

    Attributes:
        instance: the user's actor object.
        on_close: functions called (newest first, on the actor's thread) when the actor
            is dropped because its mesh stops; not called when its process just exits.
    """

    instance: Any
    on_close: list[Callable[[], None]]


def run_in_actors(
    mesh: Any, fn: Callable[..., R], *args: Any, **kwargs: Any
) -> Future[ValueMesh[R]]:
    """Call ``fn(host, *args, **kwargs)`` inside every actor of ``mesh``; one value each."""
    endpoint: Endpoint[Any, Any] = Endpoint._for_mesh(SYSTEM_ENDPOINT, _OPTIONS, mesh)
    return mesh._adverbs.call(endpoint, (fn, *args), kwargs)  # type: ignore[no-any-return]
