"""The reply to a user-level RPC (``run``, RRef fetches): its encoding on both sides.

A reply is a tuple that travels as the agent endpoint's value::

    (True, msg_key, payload, *buffers)   the value, pickled for the caller; ``msg_key``
                                         names the autograd record of its tensors (or None)
    (False, error_payload)               the function raised (actormesh's error format)

The payload and buffers ride as out-of-band buffers of the outer pickle, so a large
tensor is never copied into it.
"""

from __future__ import annotations

from pickle import PickleBuffer
from typing import TYPE_CHECKING, Any

from .._core import error_from_payload, error_payload
from .._exceptions import ActorError, SerializationError
from ._dist_autograd import Context, engine
from ._errors import ResultPickleError
from ._wire import DecodeSession, EncodeSession, decode, encode

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = ["decode_reply", "encode_reply", "failure_reply", "remote_error"]


def encode_reply(state: RpcState, value: Any, dest: int, ctx: Context | None) -> tuple[Any, ...]:
    """The reply carrying ``value`` to ``dest``, recorded in ``ctx`` when it has grads.

    Raises:
        ResultPickleError: ``value`` cannot be pickled (the caller's error for it).
    """
    session = EncodeSession(state, dest, ctx)
    try:
        payload, buffers = encode(value, session)
    except SerializationError as error:
        raise ResultPickleError(f"the result cannot be sent back: {error}") from error
    key = None
    if ctx is not None:
        key = engine(state).record_send(ctx, dest, session.grad_tensors)
    return (True, key, PickleBuffer(payload), *buffers)


def failure_reply(state: RpcState, error: BaseException, what: str) -> tuple[Any, ...]:
    """The reply saying that ``what`` (a function's name) raised ``error``."""
    payload = error_payload(
        error, mesh=state.me.name, point={"rank": state.me.id}, endpoint=what, rebuild=False
    )
    return (False, payload)


def remote_error(payload: Any) -> BaseException:
    """The error a caller raises for a failure reply.

    It is an ``actormesh.ActorError`` that is also an instance of the remote exception's
    type. When that exception cannot be rebuilt here (its class cannot be imported, or it
    does not unpickle), it is a ``RuntimeError`` naming it, as torch's is.
    """
    error = error_from_payload(payload)
    if error.cause is not None:
        return error
    message = (
        f"The remote exception could not be rebuilt here. Original exception on remote "
        f"side was {error.cause_type}: {error.cause_message}\n{error.remote_traceback}"
    )
    return ActorError.wrap(
        RuntimeError(message),
        remote_traceback=error.remote_traceback,
        mesh=error.mesh,
        point=error.point,
        endpoint=error.endpoint,
    )


def decode_reply(state: RpcState, reply: tuple[Any, ...], src: int, ctx: Context | None) -> Any:
    """The value of a reply from ``src``, or raise the remote error it carries."""
    if not reply[0]:
        raise remote_error(reply[1])
    _, key, payload, *buffers = reply
    session = DecodeSession(state, src, engine(state).receiver(ctx, key, src))
    return decode(payload, buffers, session)
