"""Envelopes: the small header that starts every frame, and the error payload format.

A header is a tuple whose first item is the message kind; it is pickled on its own so a
fan-out re-encodes only the header per destination, never the arguments. The layouts::

    (HELLO, address, pid, key, info)            worker -> owner, once connected (info: a
                                                dict; a joining process says who it is)
    (SPAWN, req_id, mesh_id, ranks)             + factory pickle and buffers
    (CALL, req_id, mesh_id, ranks, endpoint[, token])
                                                + (args, kwargs) pickle and buffers; with a
                                                token, answer on the connection that said
                                                REPLY_TO with it (if still open)
    (REPLY, req_id, rank, ok)                   + value pickle (or error payload) and buffers
    (FAILURE, mesh_id, rank, endpoint)          + error payload: a reply-less call failed
    (STOP_MESH, req_id, mesh_id)                drop every actor of a mesh in this process
    (CANCEL, req_id, mesh_id, ranks)            the caller gave up on a request
    (SHUTDOWN,)                                 the owner asks the worker to exit
    (PING, seq)                                 owner -> worker heartbeat, answered on
    (PONG, seq)                                 the worker's loop (never an actor thread)
    (INSPECT, req_id, mesh_id, ranks, call_id)  what are these actors doing about request
                                                ``call_id``? one REPLY (rank -1) with a
                                                ``{rank: description}`` pickle
    (REPLY_TO, token)                           first frame of a connection that a caller's
                                                own event loop reads replies on

``req_id`` 0 means no reply is wanted (``broadcast``).
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

from .._exceptions import ActorError, ActorInitError
from ._serialization import dumps

__all__ = [
    "CALL",
    "CANCEL",
    "FAILURE",
    "HELLO",
    "INSPECT",
    "PING",
    "PONG",
    "REPLY",
    "REPLY_TO",
    "SHUTDOWN",
    "SPAWN",
    "STOP_MESH",
    "decode_header",
    "encode_header",
    "error_from_payload",
    "error_payload",
]

HELLO, SPAWN, CALL, REPLY, FAILURE, STOP_MESH, CANCEL, SHUTDOWN = range(1, 9)
PING, PONG, INSPECT, REPLY_TO = range(9, 13)


def encode_header(header: tuple[Any, ...]) -> bytes:
    """The bytes of a header tuple."""
    return pickle.dumps(header, 5)


def decode_header(data: Any) -> tuple[Any, ...]:
    """The header tuple of a frame's first part."""
    header = pickle.loads(data)
    if not isinstance(header, tuple) or not header:
        raise ValueError(f"malformed envelope header: {header!r}")
    return header


def error_payload(
    error: BaseException, *, mesh: str, point: dict[str, int], endpoint: str, init: bool = False
) -> bytes:
    """Describe an exception raised in an actor so the caller can rebuild it.

    The exception object travels as a nested pickle, so a type the caller cannot import
    still leaves the type name, message and traceback readable. It is pickled like call
    values, so an exception class defined in the driver's ``__main__`` travels by value
    and arrives as that class.
    """
    try:
        exc_bytes: bytes | None
        exc_bytes, buffers = dumps(error)
        if buffers:  # the record must be one self-contained pickle: buffers in-band
            exc_bytes = pickle.dumps(error, 5)
    except Exception:
        exc_bytes = None
    kind = type(error)
    record = {
        "exc": exc_bytes,
        "type": kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}",
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
        "mesh": mesh,
        "point": point,
        "endpoint": endpoint,
        "init": init,
    }
    return pickle.dumps(record, 5)


def error_from_payload(data: Any) -> ActorError:
    """The ``ActorError`` (or ``ActorInitError``) described by ``error_payload``'s bytes."""
    record = pickle.loads(data)
    cause: BaseException | None = None
    message = record["message"]
    if record["exc"] is not None:
        try:
            cause = pickle.loads(record["exc"])
        except Exception as error:
            message += f" [the exception could not be unpickled here: {error!r}]"
    base = ActorInitError if record["init"] else ActorError
    return base.wrap(
        cause,
        cause_type=record["type"],
        cause_message=message,
        remote_traceback=record["traceback"],
        mesh=record["mesh"],
        point=record["point"],
        endpoint=record["endpoint"],
    )
