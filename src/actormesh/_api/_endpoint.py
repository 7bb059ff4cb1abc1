"""``@endpoint``: marks the methods of an actor that other processes may call.

On an actor class, an endpoint is a descriptor: inside the actor, ``self.step(x)`` is a
plain method call. Reached through an actor mesh (``mesh.step``) it is bound to that mesh
and offers the adverbs: ``call``/``all``, ``call_one``, ``broadcast``, ``choose``,
``stream`` and ``shard``. The descriptor is typed with ``ParamSpec`` so
``await mesh.step.call_one(x)`` type-checks as the endpoint's return type.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from .._core import EndpointKind
from .._exceptions import NotAnEndpointError
from .._pure import Arity, policy_from

if TYPE_CHECKING:
    from .._shape import ValueMesh
    from ._future import Future
    from ._requests import ValueStream

__all__ = [
    "AS_ENDPOINT",
    "Endpoint",
    "EndpointOptions",
    "NotAnEndpoint",
    "as_endpoint",
    "concurrent_endpoint",
    "endpoint",
]

# How a call names a plain method wrapped by as_endpoint(), so the actor runs it.
AS_ENDPOINT = "as_endpoint:"

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class EndpointOptions:
    """How an endpoint runs and is routed; travels with mesh references.

    Attributes:
        kind: async, sync (runs on the actor's thread) or concurrent.
        dispatch: the default ``shard`` dispatch (a ``Dispatch`` or a Ray-style function).
        choose: the default ``choose`` policy name or object, or ``None`` for the mesh's.
        idempotent: safe to run again after a restart.
        arity: what arguments it accepts, checked at the call site (``None``: unchecked).
        explicit_port: its first argument is the port it answers through.
    """

    kind: EndpointKind
    dispatch: Any = None
    choose: Any = None
    idempotent: bool = False
    arity: Arity | None = None
    explicit_port: bool = False

    def __post_init__(self) -> None:
        if self.choose is not None:
            policy_from(self.choose)  # an unknown name fails where the class is defined


class Endpoint(Generic[P, R]):
    """An endpoint: a method of an actor class, bound to a mesh when reached through one."""

    def __init__(self, fn: Callable[..., Any], options: EndpointOptions, mesh: Any = None) -> None:
        self._fn = fn
        self.name: str = fn.__name__
        self.options = options
        self._mesh = mesh
        functools.update_wrapper(self, fn)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Endpoint[P, R]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> Endpoint[P, R]: ...
    def __get__(self, instance: object | None, owner: type) -> Any:
        if instance is None:
            return self
        return self._fn.__get__(instance, owner)

    @classmethod
    def _for_mesh(cls, name: str, options: EndpointOptions, mesh: Any) -> Endpoint[Any, Any]:
        """The endpoint ``name`` bound to ``mesh`` (the function itself is not needed)."""
        bound: Endpoint[Any, Any] = cls.__new__(cls)
        bound._fn = None  # type: ignore[assignment]
        bound.name = name
        bound.options = options
        bound._mesh = mesh
        return bound

    def _target(self) -> Any:
        if self._mesh is None:
            raise TypeError(
                f"endpoint '{self.name}' is not bound to a mesh: call it through an actor "
                f"mesh, e.g. `await mesh.{self.name}.call(...)`"
            )
        return self._mesh

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Inside the actor (``self.step(x)``) this is the plain method call."""
        raise TypeError(
            f"endpoint '{self.name}' of an actor mesh is not called directly: use an adverb "
            f"such as `mesh.{self.name}.call(...)` or `.call_one(...)`"
        )

    # -- adverbs ------------------------------------------------------------------------

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Future[ValueMesh[R]]:
        """Call every actor of the mesh; the future's value has one result per actor."""
        return self._target()._adverbs.call(self, args, kwargs)  # type: ignore[no-any-return]

    def all(self, *args: P.args, **kwargs: P.kwargs) -> Future[ValueMesh[R]]:
        """Ray ActorMesh vocabulary: the same as ``call``."""
        return self.call(*args, **kwargs)

    def call_one(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call the single actor of a singleton mesh (a slice of one); its plain value."""
        return self._target()._adverbs.call_one(self, args, kwargs)  # type: ignore[no-any-return]

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Send to every actor without waiting; failures go to the mesh's owner."""
        self._target()._adverbs.broadcast(self, args, kwargs)

    def choose(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call one actor picked by the mesh's choose policy (load-aware by default)."""
        return self._target()._adverbs.choose(self, args, kwargs)  # type: ignore[no-any-return]

    def choose_with(
        self,
        *,
        key: Hashable | None = None,
        max_in_flight: int | None = None,
        when_full: Literal["wait", "error"] | None = None,
    ) -> Callable[P, Future[R]]:
        """``choose`` with options for one call: ``mesh.gen.choose_with(key=adapter)(x)``.

        Args:
            key: a routing key: calls with the same key go to the same rank while its
                load allows (a LoRA adapter or prompt prefix cached there). A policy that
                ignores keys routes keyed calls by ``Affinity`` instead.
            max_in_flight: most calls a rank may have in flight for this call to go there.
            when_full: ``"wait"`` for a rank with room, or ``"error"`` (``MeshBusyError``).
        """
        target = self._target()

        def call(*args: P.args, **kwargs: P.kwargs) -> Future[R]:
            return target._adverbs.choose(  # type: ignore[no-any-return]
                self, args, kwargs, key, max_in_flight, when_full
            )

        return call

    def reduce(self, combine: Callable[[R, R], R]) -> Callable[P, Future[R]]:
        """Call every actor and combine their values into one with ``combine``:
        ``total = mesh.count.reduce(operator.add)(batch).get()``.

        ``combine(a, b)`` must be associative and commutative (``operator.add``, ``max``,
        ``torch.maximum``): values are combined in the order they arrive. A host agent
        combines the values of its own host's actors first and sends one, so the caller
        receives one value per host, not one per actor (docs/multihost.md). The first
        actor error fails the call, as ``call`` does.

        Raises:
            TypeError: ``combine`` is not callable.
        """
        if not callable(combine):
            raise TypeError(
                f"reduce() needs a function that combines two values, such as "
                f"operator.add, not {type(combine).__name__} {combine!r}"
            )
        target = self._target()

        def call(*args: P.args, **kwargs: P.kwargs) -> Future[R]:
            return target._adverbs.reduce(self, combine, args, kwargs)  # type: ignore[no-any-return]

        return call

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> ValueStream[R]:
        """Call every actor; one ``Future`` per result, in arrival order (``ValueStream``)."""
        return self._target()._adverbs.stream(self, args, kwargs)  # type: ignore[no-any-return]

    def shard(self, *args: P.args, **kwargs: P.kwargs) -> Future[Any]:
        """Split the arguments across the actors with the endpoint's dispatch; combine."""
        return self._target()._adverbs.shard(self, args, kwargs)  # type: ignore[no-any-return]

    def shard_with(self, dispatch: Any) -> Callable[P, Future[Any]]:
        """``shard`` with a dispatch for one call: ``mesh.step.shard_with(split_along("dp"))(b)``.

        Args:
            dispatch: a ``Dispatch`` (such as ``split_along("dp", collect="value_mesh")``)
                or a Ray-style ``dispatch_fn(mesh, method_name, *args, **kwargs)`` whose
                return value (a value, a ``Future`` or a coroutine) is the result.
        """
        target = self._target()

        def call(*args: P.args, **kwargs: P.kwargs) -> Future[Any]:
            return target._adverbs.shard(self, args, kwargs, dispatch)  # type: ignore[no-any-return]

        return call

    def __repr__(self) -> str:
        where = "unbound" if self._mesh is None else f"bound to {self._mesh!r}"
        return f"<endpoint {self.name} ({self.options.kind.value}), {where}>"


@overload
def endpoint(fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]], /) -> Endpoint[P, R]: ...
@overload
def endpoint(fn: Callable[Concatenate[Any, P], R], /) -> Endpoint[P, R]: ...
@overload
def endpoint(
    *,
    concurrent: bool = False,
    dispatch: Any = None,
    choose: Any = None,
    idempotent: bool = False,
    explicit_response_port: bool = False,
    propagate: Any = None,
    instrument: bool = True,
) -> Callable[[Callable[..., Any]], Endpoint[Any, Any]]: ...
def endpoint(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    concurrent: bool = False,
    dispatch: Any = None,
    choose: Any = None,
    idempotent: bool = False,
    explicit_response_port: bool = False,
    propagate: Any = None,
    instrument: bool = True,
) -> Any:
    """Mark an actor method as an endpoint; bare (``@endpoint``) or with options.

    Args:
        concurrent: let this ``async def`` endpoint run concurrently with the actor's other
            messages instead of one at a time.
        dispatch: default ``shard`` dispatch: a ``Dispatch`` (such as ``split_along("dp")``)
            or a Ray-style ``fn(mesh, method_name, *args, **kwargs)``.
        choose: default ``choose`` policy for this endpoint.
        idempotent: the endpoint may be re-run after a rank restarts.
        explicit_response_port: the method takes a ``Port`` first (callers do not pass
            it) and answers by ``port.send(value)`` (or ``port.exception(error)``), then
            or later, from any thread; what it returns is not the answer.
        propagate: accepted for Monarch's programs; it concerns its tensor engine, which
            actormesh does not have.
        instrument: accepted for Monarch's programs (tracing spans); no effect.
    """
    del propagate, instrument

    def decorate(method: Callable[..., Any]) -> Endpoint[Any, Any]:
        if isinstance(method, Endpoint):
            raise TypeError(f"@endpoint applied twice to '{method.name}'")
        if not callable(method):
            raise TypeError(f"@endpoint needs a function, got {type(method).__name__}")
        is_async = inspect.iscoroutinefunction(method)
        if concurrent and not is_async:
            raise TypeError(
                f"@endpoint(concurrent=True) needs an `async def` method; "
                f"'{method.__name__}' is a plain `def`"
            )
        if concurrent:
            kind = EndpointKind.CONCURRENT
        elif is_async:
            kind = EndpointKind.ASYNC
        else:
            kind = EndpointKind.SYNC
        hidden = 1 if explicit_response_port else 0
        arity = Arity.of(method, hidden=hidden)
        options = EndpointOptions(
            kind, dispatch, choose, idempotent, arity, explicit_port=explicit_response_port
        )
        return Endpoint(method, options)

    if fn is not None:
        return decorate(fn)
    return decorate


def concurrent_endpoint(
    method: Callable[..., Any] | None = None,
    /,
    *,
    propagate: Any = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Any:
    """Monarch's spelling of ``@endpoint(concurrent=True)``: an ``async def`` endpoint that
    runs alongside the actor's other messages instead of one at a time.

    Raises:
        ValueError: the method is a plain ``def``, or already an ``@endpoint``.
    """

    def decorate(fn: Callable[..., Any]) -> Endpoint[Any, Any]:
        if isinstance(fn, Endpoint):
            raise ValueError(
                "concurrent_endpoint does not wrap @endpoint; pass endpoint options to "
                "@concurrent_endpoint"
            )
        if not inspect.iscoroutinefunction(fn):
            raise ValueError("concurrent_endpoint can only wrap async endpoints")
        made: Endpoint[Any, Any] = endpoint(
            concurrent=True,
            explicit_response_port=explicit_response_port,
            propagate=propagate,
            instrument=instrument,
        )(fn)
        return made

    return decorate(method) if method is not None else decorate


class NotAnEndpoint:
    """A plain method of an actor class, reached through a mesh (``mesh.helper``).

    Calling it, or any adverb of it, raises ``NotAnEndpointError`` (an
    ``EndpointNotFoundError`` and a ``RuntimeError``, as Monarch raises);
    ``as_endpoint(mesh.helper)`` makes an endpoint of it.
    """

    def __init__(self, mesh: Any, name: str) -> None:
        self.mesh = mesh
        self.name = name

    def _refuse(self) -> NotAnEndpointError:
        class_name = self.mesh._ref.class_name
        return NotAnEndpointError(
            f"'{self.name}' is a method of {class_name} but not annotated as an endpoint; "
            f"mark it with @endpoint, or wrap it: as_endpoint(mesh.{self.name}).call(...)"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse()

    def __getattr__(self, name: str) -> Any:
        if name in ("call", "call_one", "choose", "broadcast", "stream", "shard", "all"):
            raise self._refuse()
        raise AttributeError(name)


def as_endpoint(
    not_an_endpoint: Any,
    *,
    propagate: Any = None,
    explicit_response_port: bool = False,
) -> Endpoint[Any, Any]:
    """An endpoint of a plain method of an actor mesh: ``as_endpoint(mesh.helper).call()``.

    Raises:
        ValueError: the argument is not a plain method reached through a mesh.
    """
    del propagate
    if not isinstance(not_an_endpoint, NotAnEndpoint):
        raise ValueError("expected a method of a spawned actor (mesh.method)")
    mesh, name = not_an_endpoint.mesh, not_an_endpoint.name
    method = getattr(mesh._class, name)
    kind = EndpointKind.ASYNC if inspect.iscoroutinefunction(method) else EndpointKind.SYNC
    hidden = 1 if explicit_response_port else 0
    options = EndpointOptions(
        kind, arity=Arity.of(method, hidden=hidden), explicit_port=explicit_response_port
    )
    return Endpoint._for_mesh(AS_ENDPOINT + name, options, mesh)
