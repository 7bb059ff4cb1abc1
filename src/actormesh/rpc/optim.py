"""``torch.distributed.optim``'s ``DistributedOptimizer``, as ``actormesh.rpc.optim``.

``from torch.distributed.optim import DistributedOptimizer`` becomes
``from actormesh.rpc.optim import DistributedOptimizer`` (the same class as
``actormesh.rpc.DistributedOptimizer``).
"""

from __future__ import annotations

from ._optimizer import DistributedOptimizer as DistributedOptimizer

__all__ = ["DistributedOptimizer"]
