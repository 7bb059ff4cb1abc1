"""Distributed autograd, as ``torch.distributed.autograd``.

Wrap a forward pass that makes RPCs, and its backward pass, in a context::

    with autograd.context() as context_id:
        loss = rpc.rpc_sync("worker1", torch.add, args=(t1, t2)).sum()
        autograd.backward(context_id, [loss])
        grads = autograd.get_gradients(context_id)  # {tensor: gradient} of this worker

Gradients flow back across every RPC the forward pass made, including nested ones, and
accumulate in the context on the worker that owns each leaf tensor, never in ``.grad``.
Each worker's part of the pass is torch's own distributed engine, so hooks on leaves run
as with torch, and a ``DistributedDataParallel`` module averages its gradients in the
context.
Unlike torch, graphs stay alive until the context is released (leaving the ``with``
block), whatever ``retain_graph`` says, so calling ``backward`` twice accumulates.

torch's private helpers keep their names and messages: ``_new_context()``,
``_release_context(id)``, ``_retrieve_context(id)``, ``_current_context()``,
``_is_valid_context(id)``, ``_get_max_id()`` and ``_get_debug_info()``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from types import TracebackType

import torch

from ._dist_autograd import Context, _current, current_context, engine
from ._introspect import autograd_debug_info
from ._state import current

__all__ = [
    "_current_context",
    "_get_debug_info",
    "_get_max_id",
    "_is_valid_context",
    "_new_context",
    "_release_context",
    "_retrieve_context",
    "backward",
    "context",
    "get_gradients",
    "is_available",
]

# Context ids are this worker's rank in the top 16 bits and a counter below.
_ID_BITS = 48


class context:
    """A distributed autograd context for a forward and backward pass.

    ``with context() as context_id:`` makes it current on this thread; leaving the block
    releases it here and on every worker the forward pass reached.
    """

    def __init__(self) -> None:
        self._ctx: Context | None = None
        self._token: contextvars.Token[Context | None] | None = None

    def __enter__(self) -> int:
        if current_context() is not None:
            raise RuntimeError("Already have an autograd context id for this thread.")
        self._ctx = engine(current()).new_context()
        self._token = _current.set(self._ctx)
        return self._ctx.id

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            engine(current()).release(ctx.id)


def backward(context_id: int, roots: Sequence[torch.Tensor], retain_graph: bool = False) -> None:
    """Run the backward pass from ``roots`` (scalars) across every worker involved.

    Returns once gradients reached every worker and accumulated in their contexts.
    ``retain_graph`` is accepted for compatibility; graphs live until the context ends.

    Raises:
        RuntimeError: the context is unknown here, a root is not a scalar requiring grad,
            or a worker of the pass failed or died (the message says which).
    """
    engine(current()).backward(context_id, roots)


def get_gradients(context_id: int) -> dict[torch.Tensor, torch.Tensor]:
    """The gradients accumulated in the context for leaf tensors of this worker."""
    return engine(current()).get(context_id).gradients()


def is_available() -> bool:
    """True: distributed autograd is always available."""
    return True


# -- torch's private helpers --------------------------------------------------------------


def _new_context() -> Context:
    """Create a context and make it current on this thread until ``_release_context``.

    Raises:
        RuntimeError: this thread already has one.
    """
    if current_context() is not None:
        raise RuntimeError("Already have an autograd context id for this thread.")
    ctx = engine(current()).new_context()
    _current.set(ctx)
    return ctx


def _release_context(context_id: int) -> None:
    """Release a context here and on every worker it reached (``_new_context``'s end).

    Raises:
        RuntimeError: no such context on this worker.
    """
    eng = engine(current())
    eng.get(context_id)
    ctx = current_context()
    if ctx is not None and ctx.id == context_id:
        _current.set(None)
    eng.release(context_id)


def _retrieve_context(context_id: int) -> Context:
    """The context with this id on this worker.

    Raises:
        RuntimeError: "Could not find autograd context with id: ..." (never used here,
            or released).
    """
    return engine(current()).get(context_id)


def _current_context() -> Context:
    """The context current on this thread.

    Raises:
        RuntimeError: there is none.
    """
    ctx = current_context()
    if ctx is None:
        raise RuntimeError(
            "Current thread doesn't have a valid autograd context. Please wrap your code "
            "using: `with torch.distributed.autograd.context() as context_id` to generate "
            "a valid context"
        )
    return ctx


def _is_valid_context(context_id: int) -> bool:
    """True if this worker knows the context."""
    return context_id in engine(current()).contexts


def _get_max_id() -> int:
    """The largest context id this worker can create."""
    return (current().me.id << _ID_BITS) + (1 << _ID_BITS) - 1


def _get_debug_info() -> dict[str, int]:
    """``num_autograd_contexts`` and ``num_current_backward_passes`` of this worker."""
    return autograd_debug_info(current())
