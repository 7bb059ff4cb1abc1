"""``send``: an endpoint call whose answers go to a port, and ``Accumulator``.

``send(mesh.step, (x,), {}, port=port)`` calls every actor (or one, with
``selection="choose"``) without a future: each actor's answer (or error) arrives at the
port's receiver, in the order each actor answers. Without a port it is a broadcast.

``Accumulator(mesh.step, identity, combine).accumulate(x)`` calls every actor and folds
their answers as they arrive, ``combine(acc, answer)`` from ``identity``, into one value,
when its future is first observed (as Monarch's does).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from .._shape import Shape
from ._future import Future
from ._ports import Port
from ._returns_future import returns_future

__all__ = ["Accumulator", "send"]

A = TypeVar("A")
R = TypeVar("R")


def send(
    endpoint: Any,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    port: Port[Any] | None = None,
    selection: Literal["all", "choose"] = "all",
) -> None:
    """Call ``endpoint`` (of a mesh) without waiting; answers go to ``port``, if given.

    Args:
        endpoint: an endpoint reached through a mesh (``mesh.step``).
        args: the positional arguments.
        kwargs: the keyword arguments.
        port: where each actor's answer goes (``Channel.open()``); ``None``: nowhere, and
            an error goes to the mesh's owner as a failure (as ``broadcast``).
        selection: ``"all"`` the actors of the mesh, or ``"choose"`` one of the live ones.

    Raises:
        ValueError: an unknown ``selection``.
        TypeError: ``endpoint`` is not reached through a mesh.
    """
    if selection not in ("all", "choose"):
        raise ValueError(f"selection must be 'all' or 'choose', not {selection!r}")
    mesh = endpoint._target()
    if selection == "choose":
        dead = mesh._state.dead
        live = [rank for rank in mesh._shape.ranks if rank not in dead] or list(mesh._shape.ranks)
        mesh = mesh._view(Shape((), (), (random.choice(live),)))
    target = None if port is None else port.address
    mesh._adverbs.broadcast(endpoint, tuple(args), dict(kwargs or {}), target)


class Accumulator(Generic[A, R]):
    """Folds the answers of every actor of a mesh to one call into one value.

    Args:
        endpoint: the endpoint to call (``mesh.step``); anything whose
            ``stream(*args, **kwargs)`` gives an iterable of futures will do.
        identity: the starting value.
        combine: ``combine(acc, answer)`` gives the next value, once per answer, in the
            order of the stream (for a mesh's endpoint: the order the answers arrive).
    """

    def __init__(self, endpoint: Any, identity: A, combine: Callable[[A, R], A]) -> None:
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        """Call every actor now; the future's value is the fold of their answers.

        As in Monarch, the fold runs when the future is first observed, where it is
        observed (a ``@returns_future`` body: ``await`` on the awaiting loop, ``get()`` on
        the calling thread), and stops at the first error (an answer's or ``combine``'s),
        which is the future's.

        Raises:
            Exception: what ``endpoint.stream`` raised (the call could not be made).
        """
        return self._fold(self._endpoint.stream(*args, **kwargs))

    @returns_future
    async def _fold(self, results: Iterable[Future[R]]) -> A:
        value = self._identity
        for result in results:
            value = self._combine(value, await result)
        return value
