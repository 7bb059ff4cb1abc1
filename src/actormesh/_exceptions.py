"""Every error actormesh raises, in one place.

The tree::

    ActorMeshError                      base of everything below
    ├── ActorError                      an endpoint raised; also an instance of the
    │                                   original exception's type (``except ValueError``
    │                                   works), with the remote traceback and who raised
    ├── ActorInitError                  an actor's ``__init__`` raised during spawn
    ├── ActorDiedError                  the process hosting an actor died (Broken: not you;
    │                                   also ``RuntimeError``, as Monarch's errors are)
    ├── MeshStoppedError                the mesh was stopped (Closed: you stopped it; also
    │                                   ``RuntimeError``)
    ├── CallTimeoutError                a wait ran out of time (also a ``TimeoutError``)
    ├── EndpointNotFoundError           the name is not an endpoint (also ``AttributeError``)
    │   └── NotAnEndpointError          a method not marked ``@endpoint`` was called (also
    │                                   ``RuntimeError``, what Monarch raises)
    ├── ActorClassError                 a class that cannot be spawned as an actor (also
    │                                   ``TypeError`` and ``ValueError``: Monarch's)
    ├── DimensionError                  a dimension a shape does not have, or a missing one
    │                                   (also ``ValueError``, ``KeyError`` and ``TypeError``:
    │                                   what mappings, actormesh and Monarch raise)
    ├── SerializationError              an argument or result cannot be pickled (also
    │                                   ``TypeError``), naming the offending object
    ├── MessageTooLargeError            a message exceeds the configured limit (also
    │                                   ``ValueError``), raised at the sender
    ├── MeshBusyError                   ``choose`` found every live actor at its
    │                                   ``max_in_flight`` and was told not to wait
    ├── ReplicaFailedError              a service's replica failed under a call that may
    │                                   not run twice (also ``RuntimeError``)
    ├── ServiceUnavailableError         a service has no replica left to serve a call
    │                                   (also ``RuntimeError``)
    └── SupervisionError                a failure nobody handled reached the controller
                                        (also ``RuntimeError``)

Remote exceptions keep their type by building, on first use, a subclass of both
``ActorError`` and the original type. Every class here pickles: ``ActorError`` rebuilds its
dynamic subclass on unpickling.
"""

from __future__ import annotations

import builtins
from typing import Any

__all__ = [
    "ActorClassError",
    "ActorDiedError",
    "ActorError",
    "ActorInitError",
    "ActorMeshError",
    "CallTimeoutError",
    "DimensionError",
    "EndpointNotFoundError",
    "MeshBusyError",
    "MeshStoppedError",
    "MessageTooLargeError",
    "NotAnEndpointError",
    "ReplicaFailedError",
    "SerializationError",
    "ServiceUnavailableError",
    "SupervisionError",
]

# The runtime's own endpoint on every actor: ``fn(host, *args, **kwargs)`` run on the
# actor's thread, in order with its other messages. It lets library code (process groups,
# weight sync) act inside actors without the actor class declaring anything. Calling it
# needs nothing a caller could not already do by pickling a function as an argument.
# (Defined here, the lowest layer, so that errors can name it for what it is.)
SYSTEM_ENDPOINT = "__actormesh_system__"


def endpoint_named(name: str) -> str:
    """``endpoint 'name'``, for messages; the runtime's own is named for what it runs."""
    if name == SYSTEM_ENDPOINT:
        return "a library function (run_in_actors)"
    return f"endpoint '{name}'"


def endpoint_call(mesh: str, name: str) -> str:
    """``Endpoint call mesh.name()``, as Monarch's errors begin (the runtime's own
    endpoint shows as ``run_in_actors``)."""
    shown = "run_in_actors" if name == SYSTEM_ENDPOINT else name
    return f"Endpoint call {mesh}.{shown}()"


class ActorMeshError(Exception):
    """Base class of every error raised by actormesh."""


class ActorError(ActorMeshError):
    """An endpoint raised an exception.

    Attributes:
        cause: the original exception, unpickled on the caller, or ``None`` when its type
            could not be loaded here (then ``cause_type`` still names it).
        cause_type: qualified name of the original exception type.
        remote_traceback: the traceback formatted where the exception was raised.
        mesh: name of the actor mesh the failing actor belongs to.
        point: coordinates of the failing actor, as a ``{dimension: index}`` dict.
        endpoint: the endpoint that raised.
    """

    cause: BaseException | None
    cause_type: str
    cause_message: str
    remote_traceback: str
    mesh: str
    point: dict[str, int]
    endpoint: str
    _summary: str | None
    # Sent on purpose with port.exception(e): callers raise the cause itself.
    as_sent: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> ActorError:
        # BaseException.__new__ stores the positional args; keep them out so that the
        # dynamic subclass' args mirror the cause's (``e.args[0]`` of a KeyError works).
        return super().__new__(cls)

    def __init__(
        self,
        cause: BaseException | None,
        message: str | None = None,
        *,
        cause_type: str = "",
        cause_message: str = "",
        remote_traceback: str = "",
        mesh: str = "",
        point: dict[str, int] | None = None,
        endpoint: str = "",
    ) -> None:
        self.cause = cause
        self.cause_type = cause_type or (_qualname(type(cause)) if cause else "Exception")
        self.cause_message = cause_message or (str(cause) if cause is not None else "")
        self.remote_traceback = remote_traceback
        self.mesh = mesh
        self.point = dict(point or {})
        self.endpoint = endpoint
        self._summary = message
        self.args = cause.args if cause is not None else (self.cause_message,)
        if cause is not None:
            self.__cause__ = cause
            if isinstance(self, type(cause)):
                # Also an instance of the cause's type: its attributes (an ``errno``, an
                # application's error code) must answer here too; ours win on a clash.
                for name, value in getattr(cause, "__dict__", {}).items():
                    self.__dict__.setdefault(name, value)

    @property
    def exception(self) -> Any:
        """The original exception (Monarch's name for ``cause``), unless the original
        has an ``exception`` of its own: ``except ItsType`` code reads that."""
        own = self.__dict__.get("exception")
        return own if own is not None else self.cause

    @property
    def message(self) -> Any:
        """``"Actor call <mesh>.<endpoint> failed."`` (as Monarch says it), unless the
        original exception has a ``message`` of its own: ``except ItsType`` reads that."""
        own = self.__dict__.get("message")
        if own is not None:
            return own
        if self._summary is not None:
            return self._summary
        if self.endpoint:
            return f"Actor call {self.mesh}.{self.endpoint} failed."
        return "A remote actor call has failed."

    @property
    def exception_formatted(self) -> str:
        """The remote traceback (Monarch's name for ``remote_traceback``)."""
        return self.remote_traceback

    @classmethod
    def wrap(cls, cause: BaseException | None, **fields: Any) -> ActorError:
        """Build the error for ``cause``, as an instance of ``cause``'s type when possible.

        When ``cause`` is itself a remote error (an actor re-raised what another actor
        raised), the new error takes the type of the innermost original exception, so
        ``except ValueError`` works however many actors the error passed through.
        """
        origin = cause
        while isinstance(origin, ActorError) and origin.cause is not None:
            origin = origin.cause
        error_cls = _combined_class(cls, type(origin)) if origin is not None else cls
        return error_cls(cause, **fields)

    def where(self) -> str:
        """Who raised: endpoint, mesh and coordinates, for messages."""
        coords = ", ".join(f"{k}={v}" for k, v in self.point.items())
        return f"{endpoint_named(self.endpoint)} of mesh '{self.mesh}' at {{{coords}}}"

    def __str__(self) -> str:
        text = f"{self.cause_type}: {self.cause_message} (raised by {self.where()})"
        if self.remote_traceback:
            text += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        if self.endpoint and not self.endpoint.startswith("__"):
            # Monarch's first line ("Actor call trainer.step failed."), then ours (not for
            # __init__, hooks and the library's own calls into actors).
            return f"Actor call {self.mesh}.{self.endpoint} failed.\n {text}"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        base = next(c for c in type(self).__mro__ if c.__dict__.get("_actormesh_base", True))
        return (_rebuild_actor_error, (base, self.cause, self._fields()))

    def _fields(self) -> dict[str, Any]:
        return {
            "cause_type": self.cause_type,
            "cause_message": self.cause_message,
            "remote_traceback": self.remote_traceback,
            "mesh": self.mesh,
            "point": self.point,
            "endpoint": self.endpoint,
            "message": self._summary,
        }


class ActorInitError(ActorError):
    """An actor's ``__init__`` raised while its mesh was being spawned."""

    def where(self) -> str:
        coords = ", ".join(f"{k}={v}" for k, v in self.point.items())
        return f"__init__ of mesh '{self.mesh}' at {{{coords}}}"


class SupervisionError(ActorMeshError, RuntimeError):
    """A failure of an owned mesh that no ``__supervise__`` hook handled; also the base
    of the errors of calls that reach actors that are gone (`ActorDiedError`,
    `MeshStoppedError`), as Monarch raises its ``SupervisionError`` for those calls.

    Attributes:
        failure: the failure record (mesh, ranks, cause).
    """

    def __init__(self, message: str, failure: Any = None) -> None:
        super().__init__(message)
        self.failure = failure

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_kw, (type(self), self.args, self.__dict__))


class ActorDiedError(SupervisionError):
    """The process hosting an actor died, or the connection to it broke.

    Attributes:
        reason: what the runtime knows of the death (exit code, signal, lost connection).
        ranks: root ranks of the actors that are gone, when known.
        values: for a ``call`` over many actors, the values of the ranks that did answer,
            as ``{rank: value}``.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str = "",
        ranks: tuple[int, ...] = (),
        values: dict[int, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.ranks = ranks
        self.values = dict(values or {})

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_kw, (type(self), self.args, self.__dict__))


class ActorFailedError(ActorError, SupervisionError):
    """A call whose endpoint raised in a way that ends its actor, as in Monarch: a
    ``BaseException`` that is not an ``Exception`` (``SystemExit``, an application's
    fatal error), an exception escaping an ``explicit_response_port`` endpoint instead of
    going through its port, or ``abort()``. The actor is dropped; its spawner's
    supervision hears of it, and later calls fail with `ActorDiedError`.

    An `ActorError` (``cause``, ``remote_traceback``...) and a `SupervisionError`, which
    is what Monarch raises for such a call.
    """

    def __str__(self) -> str:
        coords = ", ".join(f"{k}={v}" for k, v in self.point.items())
        return (
            f"{endpoint_call(self.mesh, self.endpoint)} failed, The actor {self.mesh}"
            f"{{{coords}}} and all its descendants have failed: "
            + super().__str__().removeprefix(f"Actor call {self.mesh}.{self.endpoint} failed.\n ")
        )


class ActorAborted(BaseException):
    """Raised by ``context().actor_instance.abort(reason)`` to end its actor."""


class MeshStoppedError(SupervisionError):
    """The mesh was stopped: pending calls fail with this and new calls are refused."""


class CallTimeoutError(ActorMeshError, TimeoutError):
    """A wait ran out of time.

    Attributes:
        pending: root ranks that had not answered.
    """

    def __init__(self, message: str, *, pending: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.pending = pending

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_kw, (type(self), self.args, self.__dict__))


class EndpointNotFoundError(ActorMeshError, AttributeError):
    """The name is not an endpoint of the actor class (unknown, or not ``@endpoint``)."""


class NotAnEndpointError(EndpointNotFoundError, RuntimeError):
    """A method the actor class has, but not marked ``@endpoint``, was called."""


class ActorClassError(ActorMeshError, TypeError, ValueError):
    """A class cannot be an actor: not a subclass of ``Actor``, or an endpoint whose
    name collides with an attribute of actor meshes (``stop``, ``slice``...)."""


class DimensionError(ActorMeshError, ValueError, KeyError, TypeError):
    """A shape has no dimension of that name (or a dimension was left out).

    One error for every way code written for a mapping, for actormesh or for Monarch
    catches it: ``KeyError`` (a point is a mapping), ``ValueError`` (actormesh's error for
    bad dimensions), ``TypeError`` (what Monarch's ``slice`` raises).
    """

    def __str__(self) -> str:
        # KeyError would quote the message.
        return str(self.args[0]) if self.args else ""


class SerializationError(ActorMeshError, TypeError):
    """A value cannot be pickled; the message names the offending object."""


class MessageTooLargeError(ActorMeshError, ValueError):
    """A message is larger than ``Config.max_message_bytes``; raised before sending."""


class MeshBusyError(ActorMeshError):
    """Every live actor a ``choose`` could pick has ``max_in_flight`` calls in flight.

    Raised at the call site when the mesh (or the call) says ``when_full="error"``; with
    ``"wait"`` the call waits for a rank with capacity instead.
    """


class ReplicaFailedError(ActorMeshError, RuntimeError):
    """A replica of a service failed while a call was running on it, and the endpoint is
    not marked idempotent, so the call was not run again elsewhere (it may have run,
    partly or wholly).

    Attributes:
        service: the service's name.
        replica: the failed replica's number.
        reason: what the service knows of the failure.
    """

    def __init__(
        self, message: str, *, service: str = "", replica: int = -1, reason: str = ""
    ) -> None:
        super().__init__(message)
        self.service = service
        self.replica = replica
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_kw, (type(self), self.args, self.__dict__))


class ServiceUnavailableError(ActorMeshError, RuntimeError):
    """No replica of a service can take a call: every one failed beyond its restart
    budget, or the service was stopped."""


_COMBINED: dict[tuple[type, type], type] = {}


def _combined_class(base: type[ActorError], cause_type: type[BaseException]) -> type[ActorError]:
    """A subclass of ``base`` and ``cause_type``, cached; ``base`` when they cannot mix."""
    if issubclass(cause_type, base) or not issubclass(cause_type, Exception):
        return base
    key = (base, cause_type)
    combined = _COMBINED.get(key)
    if combined is None:
        try:
            combined = type(
                f"{base.__name__}[{cause_type.__name__}]",
                (base, cause_type),
                {"_actormesh_base": False, "__module__": "actormesh", "__str__": base.__str__},
            )
        except TypeError:  # layout conflicts, final types: keep the cause in .cause only
            combined = base
        _COMBINED[key] = combined
    return combined


def _rebuild_actor_error(
    base: type[ActorError], cause: BaseException | None, fields: dict[str, Any]
) -> ActorError:
    return base.wrap(cause, **fields)


def _rebuild_kw(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def _qualname(cls: type) -> str:
    module = cls.__module__
    if module in ("builtins", builtins.__name__):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


for _cls in (
    ActorMeshError,
    ActorError,
    ActorInitError,
    ActorDiedError,
    MeshStoppedError,
    CallTimeoutError,
    EndpointNotFoundError,
    NotAnEndpointError,
    ActorClassError,
    DimensionError,
    SerializationError,
    MessageTooLargeError,
    MeshBusyError,
    ReplicaFailedError,
    ServiceUnavailableError,
    SupervisionError,
    ActorFailedError,
):
    _cls.__module__ = "actormesh"
