"""Envelopes: the small header that starts every frame, and the error payload format.

A header is a tuple whose first item is the message kind; it is pickled on its own so a
fan-out re-encodes only the header per destination, never the arguments. The layouts::

    (HELLO, address, pid, key, info)            worker -> owner, once connected (info: a
                                                dict; a joining process says who it is)
    (SPAWN, req_id, mesh_id, ranks)             + factory pickle and buffers
    (CALL, req_id, mesh_id, ranks, endpoint[, token[, port[, view[, trace]]]])
                                                + (args, kwargs) pickle and buffers; with a
                                                token, answer on the connection that said
                                                REPLY_TO with it (if still open); with a
                                                port (address, id), send each actor's
                                                answer there as a REPLY to that id; view:
                                                (labels, sizes, ranks) of the slice called;
                                                trace: the caller's W3C traceparent (only
                                                with OpenTelemetry on, see _otel)
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
    (OBSERVE, req_id, what)                     owner -> worker: what the process and its
                                                actors are doing (``what``: "stats" or
                                                "stacks"); one REPLY (rank -1) with a dict
                                                pickle, built on the worker's loop
    (DEBUG, session, op)                        + details pickle: a remote breakpoint.
                                                Worker -> owner on a connection of its own
                                                ("open", "out", "state", "close"); owner ->
                                                worker ("in"); owners that are not the
                                                controller pass them on by ``session``

Between an owner and a host agent (``actormesh._hosts``), which stands between the owner
and the workers of one host::

    (RELAY, address)                            + a whole frame for the worker at address
    (CAST, gather, [(address, ranks, header)])  + parts shared by every worker named: each
                                                gets its header and the parts; gather: the
                                                req_id whose replies the agent batches
    (REPLIES, [(req_id, rank, ok, nparts)])     + every reply's parts, back to back
    (HOST, req_id, op)                          + args pickle: a host operation (spawn,
                                                relaunch, signal); one REPLY (rank -1)
    (EVENT, what, address)                      + details pickle: a worker exited, or
                                                output lines for the owner's streams

``req_id`` 0 means no reply is wanted (``broadcast``).
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

from .._exceptions import ActorError, ActorInitError
from ._dispatch import entry_for, frame_table
from ._serialization import dumps

__all__ = [
    "CALL",
    "CANCEL",
    "CAST",
    "DEBUG",
    "EVENT",
    "FAILURE",
    "HELLO",
    "HOST",
    "INSPECT",
    "LAYOUTS",
    "OBSERVE",
    "PING",
    "PONG",
    "RELAY",
    "REPLIES",
    "REPLY",
    "REPLY_TO",
    "SHUTDOWN",
    "SPAWN",
    "STOP_MESH",
    "decode_header",
    "encode_header",
    "error_from_payload",
    "error_payload",
    "raised_error",
]

HELLO, SPAWN, CALL, REPLY, FAILURE, STOP_MESH, CANCEL, SHUTDOWN = range(1, 9)
PING, PONG, INSPECT, REPLY_TO = range(9, 13)
RELAY, CAST, REPLIES, HOST, EVENT = range(13, 18)
OBSERVE, DEBUG = range(18, 20)


def encode_header(header: tuple[Any, ...]) -> bytes:
    """The bytes of a header tuple."""
    return pickle.dumps(header, 5)


# How many items a header of each kind may have (CALL: with or without a reply-route
# token, port and view, and a ninth: the caller's trace context, see _otel.with_trace).
LAYOUTS: dict[int, tuple[int, ...]] = {
    HELLO: (5,),
    SPAWN: (4,),
    CALL: (5, 6, 7, 8, 9),
    REPLY: (4,),
    FAILURE: (4,),
    STOP_MESH: (3,),
    CANCEL: (4,),
    SHUTDOWN: (1,),
    PING: (2,),
    PONG: (2,),
    INSPECT: (5,),
    REPLY_TO: (2,),
    RELAY: (2,),
    CAST: (3,),
    REPLIES: (2,),
    HOST: (3,),
    EVENT: (3,),
    OBSERVE: (3,),
    DEBUG: (3,),
}


def _known(conn: Any, header: tuple[Any, ...], parts: Any) -> None:
    """The handler of every kind in ``_CHECKS`` (a table used only to check headers)."""


_CHECKS = frame_table(LAYOUTS, {}, _known)


def decode_header(data: Any) -> tuple[Any, ...]:
    """The header tuple of a frame's first part (frames a runtime receives go through
    ``_dispatch.dispatch``, which checks them the same way).

    Raises:
        ValueError: not a header of a kind this version knows, with that kind's layout.
    """
    header: tuple[Any, ...] = pickle.loads(data)
    entry_for(_CHECKS, header)
    return header


def error_payload(
    error: BaseException,
    *,
    mesh: str,
    point: dict[str, int],
    endpoint: str,
    init: bool = False,
    as_sent: bool = False,
    rebuild: bool = True,
) -> bytes:
    """Describe an exception raised in an actor so the caller can rebuild it.

    ``as_sent``: the error was sent on purpose (``port.exception(e)``): the caller raises
    the exception itself, not an ``ActorError`` around it. ``rebuild``: an exception that
    does not unpickle as it is may be sent as its parts (see ``_exception_bytes``); the
    RPC layer says no, as torch raises a ``RuntimeError`` for those.

    The exception object travels as a nested pickle, so a type the caller cannot import
    still leaves the type name, message and traceback readable. It is pickled like call
    values, so an exception class defined in the driver's ``__main__`` travels by value
    and arrives as that class.
    """
    exc_bytes = _exception_bytes(error) if rebuild else _pickled(error)
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
        "as_sent": as_sent,
    }
    return pickle.dumps(record, 5)


def _exception_bytes(error: BaseException) -> bytes | None:
    """The exception as one self-contained pickle that unpickles, tried here first.

    Python pickles an exception as its type called with its ``args``: a subclass whose
    ``__init__`` takes other arguments than it passes up (``HttpError(status, url)``), or
    one holding an attribute that cannot be pickled (a lock), would not arrive as its own
    type. Such a one is sent as its type, ``args`` and the attributes that pickle, rebuilt
    without calling ``__init__`` (``rebuilt_exception``). Tried in this order, each
    unpickled here (where its class surely exists) before it is chosen; when neither
    works, the plain pickle goes (the caller then says why it could not unpickle it).
    """
    plain = _pickled(error)
    if _unpickles(plain):
        return plain
    # Only now: pickling the parts tries each argument and attribute on its own.
    parts = _pickled(_ExceptionParts(error))
    return parts if _unpickles(parts) else plain


def _unpickles(data: bytes | None) -> bool:
    if data is None:
        return False
    try:
        pickle.loads(data)
    except Exception:
        return False
    return True


def _pickled(obj: Any) -> bytes | None:
    try:
        data, buffers = dumps(obj)
        if buffers:  # the record must be one self-contained pickle: buffers in-band
            data = pickle.dumps(obj, 5)
    except Exception:
        return None
    return data


class _ExceptionParts:
    """Pickles as ``rebuilt_exception(type, args, picklable attributes, left out)``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        error = self.error
        args = tuple(arg if _pickled(arg) is not None else repr(arg) for arg in error.args)
        state, left_out = {}, []
        for name, value in getattr(error, "__dict__", {}).items():
            if _pickled(value) is None:
                left_out.append(name)
            else:
                state[name] = value
        return (rebuilt_exception, (type(error), args, state, left_out))


def rebuilt_exception(
    kind: type[BaseException], args: tuple[Any, ...], state: dict[str, Any], left_out: list[str]
) -> BaseException:
    """An exception of ``kind`` with ``args`` and attributes ``state``, ``__init__`` not
    called (see ``_exception_bytes``); a note names the attributes that were left out."""
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(state)
    if left_out:
        error.add_note(
            f"(not sent by the actor, as they could not be pickled: {', '.join(left_out)})"
        )
    return error


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
    rebuilt = base.wrap(
        cause,
        cause_type=record["type"],
        cause_message=message,
        remote_traceback=record["traceback"],
        mesh=record["mesh"],
        point=record["point"],
        endpoint=record["endpoint"],
    )
    rebuilt.as_sent = bool(record.get("as_sent"))
    return rebuilt


def raised_error(data: Any) -> BaseException:
    """What a caller raises for ``error_payload``'s bytes: the exception itself when it was
    sent on purpose (``as_sent``) and could be rebuilt here, else its ``ActorError``."""
    error = error_from_payload(data)
    if error.as_sent and error.cause is not None:
        return error.cause
    return error
