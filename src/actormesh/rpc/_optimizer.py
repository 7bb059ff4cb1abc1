"""``DistributedOptimizer``: one optimizer per parameter owner, stepped with a context's grads.

As ``torch.distributed.optim.DistributedOptimizer``: the constructor creates, on each
worker that owns some of the parameters, a local optimizer over them; ``step(context_id)``
makes every owner run its optimizer with the gradients that distributed autograd
accumulated there for that context. Parameters without a gradient in the context are
left alone, and ``.grad`` is left as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from ._api import remote, rpc_async
from ._rref import RRef
from .autograd import get_gradients

__all__ = ["DistributedOptimizer"]


class DistributedOptimizer:
    """Optimize parameters that live on several workers, given as ``RRef``s.

    Args:
        optimizer_class: a ``torch.optim.Optimizer`` class, built on each owner.
        params_rref: ``RRef``s of the parameters (local ``RRef(p)`` or remote ones).
        *args: passed to ``optimizer_class`` after the parameter list.
        **kwargs: passed to ``optimizer_class`` (``lr=0.05`` ...).
    """

    def __init__(
        self,
        optimizer_class: type[torch.optim.Optimizer],
        params_rref: Sequence[RRef[Any]],
        *args: Any,
        **kwargs: Any,
    ) -> None:
        by_owner: dict[Any, list[RRef[Any]]] = {}
        for rref in params_rref:
            by_owner.setdefault(rref.owner(), []).append(rref)
        self.remote_optimizers: list[RRef[_LocalOptimizer]] = [
            remote(owner, _LocalOptimizer, args=(optimizer_class, rrefs, args, kwargs))
            for owner, rrefs in by_owner.items()
        ]
        for optimizer in self.remote_optimizers:
            optimizer._wait_created()

    def step(self, context_id: int) -> None:
        """Run every owner's optimizer with the gradients of ``context_id``.

        Raises:
            Exception: the first error of any owner, after all have finished.
        """
        futures = [
            rpc_async(optimizer.owner(), _local_step, args=(optimizer, context_id))
            for optimizer in self.remote_optimizers
        ]
        errors = []
        for future in futures:
            try:
                future.wait()
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]


class _LocalOptimizer:
    """The optimizer over the parameters one worker owns."""

    # Steps of different optimizers in one process may touch shared parameters.
    _lock = threading.Lock()

    def __init__(
        self,
        optimizer_class: type[torch.optim.Optimizer],
        param_rrefs: list[RRef[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.params = [rref.local_value() for rref in param_rrefs]
        self.optimizer = optimizer_class(self.params, *args, **kwargs)

    def step(self, context_id: int) -> None:
        grads = get_gradients(context_id)
        with self._lock:
            saved = [param.grad for param in self.params]
            for param in self.params:
                param.grad = grads.get(param)
            try:
                self.optimizer.step()
            finally:
                for param, grad in zip(self.params, saved):
                    param.grad = grad


def _local_step(optimizer: RRef[_LocalOptimizer], context_id: int) -> None:
    optimizer.local_value().step(context_id)
