"""``torch.distributed.rpc`` on actormesh: the same API, on the actor runtime.

Change ``import torch.distributed.rpc as rpc`` to ``from actormesh import rpc`` (and
``torch.distributed.autograd`` to ``actormesh.rpc.autograd``,
``torch.distributed.optim.DistributedOptimizer`` to ``actormesh.rpc.DistributedOptimizer``
or ``actormesh.rpc.optim.DistributedOptimizer``,
``torch.distributed.nn.RemoteModule`` to ``actormesh.rpc.RemoteModule``)::

    rpc.init_rpc("worker0", rank=0, world_size=2)
    ret = rpc.rpc_sync("worker1", torch.add, args=(torch.ones(2), 3))
    rref = rpc.remote("worker1", MyClass, args=(1,))
    rpc.shutdown()

What differs from torch: a dead worker fails pending calls, ``to_here``, backward passes
and ``shutdown`` with ``WorkerDiedError`` instead of hanging; functions and classes of
the main script may be sent even when the receiver cannot import them; workers must run
on one host for now. See ``docs/rpc.md``.
"""

from __future__ import annotations

from . import autograd as autograd
from . import functions as functions
from . import optim as optim
from ._api import _set_rpc_timeout as _set_rpc_timeout
from ._api import _thread_local_var as _thread_local_var
from ._api import _wait_all as _wait_all
from ._api import get_rpc_timeout as get_rpc_timeout
from ._api import get_worker_info as get_worker_info
from ._api import init_rpc as init_rpc
from ._api import is_available as is_available
from ._api import remote as remote
from ._api import rpc_async as rpc_async
from ._api import rpc_sync as rpc_sync
from ._api import shutdown as shutdown
from ._collectives import _all_gather as _all_gather
from ._collectives import _barrier as _barrier
from ._collectives import _wait_all_workers as _wait_all_workers
from ._errors import ResultPickleError as ResultPickleError
from ._errors import RpcNotInitialized as RpcNotInitialized
from ._errors import RpcTimeoutError as RpcTimeoutError
from ._errors import WorkerDiedError as WorkerDiedError
from ._introspect import _get_current_rpc_agent as _get_current_rpc_agent
from ._introspect import _get_debug_info as _get_debug_info
from ._introspect import _is_current_rpc_agent_set as _is_current_rpc_agent_set
from ._introspect import _rref_context_get_debug_info as _rref_context_get_debug_info
from ._optimizer import DistributedOptimizer as DistributedOptimizer
from ._options import BackendType as BackendType
from ._options import RpcBackendOptions as RpcBackendOptions
from ._options import TensorPipeRpcBackendOptions as TensorPipeRpcBackendOptions
from ._remote_module import RemoteModule as RemoteModule
from ._rendezvous import RendezvousError as RendezvousError
from ._rref import RRef as RRef
from ._worker_info import WorkerInfo as WorkerInfo

__all__ = [
    "BackendType",
    "DistributedOptimizer",
    "RRef",
    "RemoteModule",
    "RendezvousError",
    "ResultPickleError",
    "RpcBackendOptions",
    "RpcNotInitialized",
    "RpcTimeoutError",
    "TensorPipeRpcBackendOptions",
    "WorkerDiedError",
    "WorkerInfo",
    "autograd",
    "functions",
    "get_rpc_timeout",
    "get_worker_info",
    "init_rpc",
    "is_available",
    "optim",
    "remote",
    "rpc_async",
    "rpc_sync",
    "shutdown",
]
