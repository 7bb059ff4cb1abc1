"""Distributed autograd, as ``torch.distributed.autograd``.

Wrap a forward pass that makes RPCs, and its backward pass, in a context::

    with autograd.context() as context_id:
        loss = rpc.rpc_sync("worker1", torch.add, args=(t1, t2)).sum()
        autograd.backward(context_id, [loss])
        grads = autograd.get_gradients(context_id)  # {tensor: gradient} of this worker

Gradients flow back across every RPC the forward pass made, including nested ones, and
accumulate in the context on the worker that owns each leaf tensor, never in ``.grad``.
Unlike torch, graphs stay alive until the context is released (leaving the ``with``
block), whatever ``retain_graph`` says, so calling ``backward`` twice accumulates.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from types import TracebackType

import torch

from ._dist_autograd import Context, _current, current_context, engine
from ._state import current

__all__ = ["backward", "context", "get_gradients", "is_available"]


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
            raise RuntimeError("this thread already has a distributed autograd context")
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
    engine(current()).backward(context_id, list(roots))


def get_gradients(context_id: int) -> dict[torch.Tensor, torch.Tensor]:
    """The gradients accumulated in the context for leaf tensors of this worker."""
    ctx = engine(current()).get(context_id)
    with ctx.lock:
        return dict(ctx.grads)


def is_available() -> bool:
    """True: distributed autograd is always available."""
    return True
