"""The process groups a rank makes, kept until its test method has returned.

This works around a deadlock in torch itself (seen with torch's own RPC backend too):

- DDP's ``Reducer`` holds a reference to its process group, and its Python binding frees
  it with the GIL held (a ``shared_ptr`` holder; ``ProcessGroup``'s own binding releases
  the GIL before its C++ destructor runs). When a test drops its
  ``DistributedDataParallel`` module after ``destroy_process_group()``, the ``Reducer``
  drops the group's last reference, and ``~ProcessGroupGloo`` joins gloo's worker
  threads with the GIL still held.
- A worker that has finished a collective on a tensor made in Python (``Join``'s
  ``torch.zeros(1)`` counting the ranks not yet joined, DDP's ``torch.tensor([rank])``
  choosing the rank to copy the model from) lets go of the tensor when it drops the
  work, and letting go of a tensor that has a Python object takes the GIL. If the main
  thread got to the join first, neither moves: the rank hangs at the end of its test
  (``DdpComparisonTest.test_ddp_comparison``, about one run in eight; docs/rpc.md).

So each rank keeps a Python reference to every default process group it creates
(``install``) and drops them once the test method has returned (``release``): the last
reference then goes from Python, whose binding releases the GIL before the C++
destructor joins the workers.

It also closes a race in ``DdpUnderDistAutogradTest``: the master sends each trainer an
``rpc.remote(Trainer)`` whose constructor calls ``dist.new_group`` as soon as its own
``init_process_group`` returns, and the trainer's may not have returned yet ("Default
process group has not been initialized"; torch's slower RPC rarely loses that race). A
barrier after ``init_process_group`` (every rank of these tests calls it) lets no rank go
on before every rank's default group exists.
"""

from __future__ import annotations

import functools
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d

__all__ = ["install", "kept", "release"]

_kept: list[Any] = []
_installed = False


def install() -> None:
    """Make ``torch.distributed.init_process_group`` keep the group it creates."""
    global _installed
    if _installed:
        return
    _installed = True
    original = distributed_c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        _kept.append(distributed_c10d._get_default_group())
        dist.barrier()

    distributed_c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group


def kept() -> int:
    """How many process groups are kept now."""
    return len(_kept)


def release() -> None:
    """Drop the kept groups: one that was the last reference to its group is destroyed
    here, with the GIL released while gloo's workers finish."""
    _kept.clear()
