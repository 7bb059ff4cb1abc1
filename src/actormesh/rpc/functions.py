"""``async_execution``: RPC functions that reply when a future completes, not on return.

Mirrors ``torch.distributed.rpc.functions``. The callee runs the decorated function, takes
the ``torch.futures.Future`` it returns, and sends the reply when that future completes;
no RPC thread waits in between, so thousands of such calls can be parked at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ._execute import ASYNC_MARK

__all__ = ["async_execution"]

F = TypeVar("F", bound=Callable[..., Any])


def async_execution(fn: F) -> F:
    """Mark ``fn`` as returning a ``torch.futures.Future`` whose value is the RPC's reply.

    Combined with ``@staticmethod`` or ``@classmethod``, this decorator goes inside
    (nearer the function). The future is only used on the callee; the caller gets its
    value as usual.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    setattr(wrapper, ASYNC_MARK, fn)
    return wrapper  # type: ignore[return-value]
