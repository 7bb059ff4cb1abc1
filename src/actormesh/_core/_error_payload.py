"""Error payloads: how an exception raised in an actor travels to its caller (the part of
a Reply or Failure frame after its header; see ``_headers``).
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

from .._exceptions import ActorError, ActorFailedError, ActorInitError
from ._serialization import dumps

__all__ = ["error_from_payload", "error_payload", "raised_error", "rebuilt_exception"]


def error_payload(
    error: BaseException,
    *,
    mesh: str,
    point: dict[str, int],
    endpoint: str,
    init: bool = False,
    as_sent: bool = False,
    rebuild: bool = True,
    ends_actor: bool = False,
) -> bytes:
    """Describe an exception raised in an actor so the caller can rebuild it.

    ``as_sent``: the error was sent on purpose (``port.exception(e)``): the caller raises
    the exception itself, not an ``ActorError`` around it. ``ends_actor``: the failure
    ends the actor (the caller raises an ``ActorFailedError``). ``rebuild``: an exception that
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
        "ends_actor": ends_actor,
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
    base: type[ActorError] = ActorInitError if record["init"] else ActorError
    if record.get("ends_actor"):
        base = ActorFailedError
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
