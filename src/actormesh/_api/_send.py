"""``send``: an endpoint call whose answers go to a port, and ``Accumulator``.

``send(mesh.step, (x,), {}, port=port)`` calls every actor (or one, with
``selection="choose"``) without a future: each actor's answer (or error) arrives at the
port's receiver, in the order each actor answers. Without a port it is a broadcast.

``Accumulator(mesh.step, identity, combine).accumulate(x)`` calls every actor and folds
their answers as they arrive, ``combine(acc, answer)`` from ``identity``, into one value.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from .._hosts import Runtime
from .._shape import Shape
from ._future import Future
from ._ports import Port

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
        endpoint: the endpoint to call (``mesh.step``).
        identity: the starting value.
        combine: ``combine(acc, answer)`` gives the next value, once per answer, in the
            order the answers arrive.
    """

    def __init__(self, endpoint: Any, identity: A, combine: Callable[[A, R], A]) -> None:
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        """Call every actor; the future's value is the fold of their answers (the first
        error, if one raised)."""
        stream = self._endpoint.stream(*args, **kwargs)
        fold = _Fold(self._identity, self._combine, len(stream))
        for future in stream:  # resolved in arrival order, so folded in that order
            future.add_done_callback(fold.add)
        return fold.result


class _Fold(Generic[A, R]):
    """The state of one ``accumulate``: the value so far and the answers still to come."""

    def __init__(self, identity: A, combine: Callable[[A, R], A], count: int) -> None:
        self.value = identity
        self.combine = combine
        self.left = count
        self.lock = threading.Lock()
        self.result: Future[A] = Future._new(Runtime.get().in_loop_thread)
        if count == 0:
            self.result._set_result(identity)

    def add(self, answer: Future[R]) -> None:
        error = answer.exception()
        with self.lock:
            if self.result.done():
                return
            if error is None:
                try:
                    self.value = self.combine(self.value, answer.result())
                except Exception as failure:
                    error = failure
            self.left -= 1
            finished = self.left == 0
        if error is not None:
            self.result._set_exception(error)
        elif finished:
            self.result._set_result(self.value)
