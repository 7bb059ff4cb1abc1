"""The errors ``actormesh.rpc`` raises on top of actormesh's own.

torch's RPC raises ``RuntimeError`` for timeouts and lost workers, so code written for it
catches ``RuntimeError``; these classes keep that working while also being the actormesh
errors of the same meaning::

    RpcTimeoutError      CallTimeoutError + RuntimeError   an RPC or wait ran out of time
    WorkerDiedError      ActorDiedError + RuntimeError     the worker died or left
    RpcNotInitialized    RuntimeError                      no ``init_rpc`` in this process
    ResultPickleError    SerializationError + RuntimeError a function's result cannot be sent

An exception raised by the remote function itself is re-raised as ``actormesh.ActorError``
that is also an instance of the original type, with the remote traceback in its message.
"""

from __future__ import annotations

from .._exceptions import ActorDiedError, CallTimeoutError, SerializationError

__all__ = ["ResultPickleError", "RpcNotInitialized", "RpcTimeoutError", "WorkerDiedError"]


class RpcTimeoutError(CallTimeoutError, RuntimeError):
    """An RPC, ``to_here``, a rendezvous or a shutdown barrier ran out of time."""


class WorkerDiedError(ActorDiedError, RuntimeError):
    """The worker an RPC went to died (or shut down) before answering."""


class RpcNotInitialized(RuntimeError):
    """An RPC API was used in a process that has not called ``init_rpc`` (or shut down)."""


class ResultPickleError(SerializationError, RuntimeError):
    """What a remote function returned (or an RRef holds) cannot be pickled to be sent
    back; its caller gets this, a ``RuntimeError`` as with torch."""


for _cls in (RpcTimeoutError, WorkerDiedError, RpcNotInitialized, ResultPickleError):
    _cls.__module__ = "actormesh.rpc"
