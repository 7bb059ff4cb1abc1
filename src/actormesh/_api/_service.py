"""Services: replicas that are whole meshes, routed to, restarted as a unit, refitted.

``spawn_service("gen", Generator, replicas=3, per_replica={"tp": 2}, ...)`` starts three
replicas of two processes each; ``await service.generate.route(prompt)`` sends the call
to one replica, where every rank runs it (SPMD inside the replica: a tensor-parallel
group) and the answer is rank 0's. The service owns its processes: a replica whose rank
dies is rebuilt from new processes as a whole, and ``scale`` adds or removes processes,
so it is a function of its own rather than a method of a process mesh made elsewhere.
See docs/services.md; the engine is ``_service_core``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from .._exceptions import EndpointNotFoundError
from .._hosts import Runtime
from .._pure import ChoosePolicy, policy_from
from .._shape import ValueMesh
from . import _supervision
from ._actor import Actor, endpoint_table
from ._future import Future, from_concurrent
from ._service_call import RefitPolicy, ServiceCall, ServiceSettings
from ._service_core import ServiceCore
from ._service_values import Answer, ReplicaStats

__all__ = ["Service", "ServiceEndpoint", "Session", "spawn_service"]

R = TypeVar("R")


def spawn_service(
    name: str,
    actor_class: type,
    *,
    replicas: int,
    per_replica: Mapping[str, int] | int = 1,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    router: ChoosePolicy | str = "least_loaded",
    max_in_flight: int = 1,
    setup: Iterable[Callable[[Any], Any]] = (),
    load_weights: Callable[[Any, int], Any] | None = None,
    version: int = 0,
    refit: RefitPolicy = "pause",
    max_restarts: int = 3,
    restart_window: float = 300.0,
    max_attempts: int = 3,
    retry_backoff: float = 0.05,
    reduce: Callable[[ValueMesh[Any]], Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Future[Service]:
    """Start a service of ``replicas`` replicas, each a mesh of ``per_replica`` processes
    with one ``actor_class(*args, **kwargs)`` in each.

    Args:
        name: the service's name (its process meshes are ``<name>.<replica>``).
        actor_class: a subclass of ``actormesh.Actor``.
        replicas: how many replicas (at least 1; `Service.scale` changes it).
        per_replica: the dimensions of each replica's mesh, ``{"tp": 2}`` (an int: one
            dimension ``"procs"``).
        args, kwargs: the actors' constructor arguments.
        router: which serving replica a call goes to: ``"least_loaded"`` (calls queued
            and in flight through this service), ``"round_robin"``, ``"power_of_two"``,
            ``"random"``, or any object with ``choose(candidates, loads, key)`` (a
            `ChoosePolicy`; candidates are replica numbers).
        max_in_flight: calls a replica runs at once; the rest queue in the service,
            where a failure can still move them (at least 1).
        setup: functions called with each replica's actor mesh every time the replica is
            built, in order, before weights load; a result that is awaitable is awaited.
            ``actormesh.torch.setup_process_group`` gives each replica its own
            ``torch.distributed`` group (gloo on CPU, nccl on GPUs).
        load_weights: ``load_weights(actors, version)`` brings a replica's actors to a
            weight version: at build and rebuild, and at each `Service.update_weights`.
        version: the weight version the service starts at.
        refit: how `Service.update_weights` meets requests by default: ``"pause"`` or
            ``"rolling"`` (see docs/services.md).
        max_restarts: rebuilds a replica may have within ``restart_window`` seconds;
            beyond it the replica stays failed and the failure goes to the controller's
            failure hook.
        max_attempts: sends of one call of an idempotent endpoint
            (``@endpoint(idempotent=True)``) when replicas fail under it.
        retry_backoff: seconds before the first resend; doubled for each further one.
        reduce: the replica's answer from every rank's (a ``ValueMesh``); by default
            rank 0's value.
        env: extra environment variables for every process.

    Raises:
        TypeError, ValueError: at the call site, for a bad argument.
    """
    _check_arguments(name, actor_class, replicas, max_in_flight, max_restarts, restart_window,
                     max_attempts, retry_backoff, refit)  # fmt: skip
    dims = {"procs": per_replica} if isinstance(per_replica, int) else dict(per_replica)
    if not dims or any(not isinstance(n, int) or n < 1 for n in dims.values()):
        raise ValueError(f"per_replica must give positive sizes, not {per_replica!r}")
    settings = ServiceSettings(
        replicas=replicas,
        per_replica=dims,
        router=policy_from(router),
        max_in_flight=max_in_flight,
        max_restarts=max_restarts,
        restart_window=restart_window,
        max_attempts=max_attempts,
        retry_backoff=retry_backoff,
        refit=refit,
        version=version,
        setup=tuple(setup),
        load_weights=load_weights,
        reduce=reduce,
        env=env,
        args=tuple(args),
        kwargs=dict(kwargs or {}),
    )
    runtime = Runtime.get()
    _supervision.install(runtime)

    async def start() -> Service:
        core = ServiceCore(name, actor_class, settings)
        await core.start(replicas)
        return Service(core)

    return from_concurrent(runtime, runtime.submit(start()))


def _check_arguments(
    name: str,
    actor_class: type,
    replicas: int,
    max_in_flight: int,
    max_restarts: int,
    restart_window: float,
    max_attempts: int,
    retry_backoff: float,
    refit: str,
) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"spawn_service needs a name (a non-empty str), got {name!r}")
    if not (isinstance(actor_class, type) and issubclass(actor_class, Actor)):
        raise TypeError(f"spawn_service needs a subclass of actormesh.Actor, got {actor_class!r}")
    for label, value, low in (
        ("replicas", replicas, 1),
        ("max_in_flight", max_in_flight, 1),
        ("max_restarts", max_restarts, 0),
        ("max_attempts", max_attempts, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{label} must be an int of at least {low}, not {value!r}")
    if not restart_window > 0 or not retry_backoff >= 0:
        raise ValueError("restart_window must be positive and retry_backoff not negative")
    if refit not in ("pause", "rolling"):
        raise ValueError(f"refit must be 'pause' or 'rolling', not {refit!r}")


class Service:
    """Replicas of an actor class behind one handle; made by `spawn_service`.

    ``service.<endpoint>`` is a `ServiceEndpoint`. Methods that change the service
    (`update_weights`, `scale`, `stop`) return futures; `stats` answers at once.
    """

    def __init__(self, core: ServiceCore) -> None:
        self._core = core
        self._endpoints = endpoint_table(core.actor_class)
        self._asking = threading.Lock()
        self._asked = core.version  # the last version update_weights was asked for

    @property
    def name(self) -> str:
        """The service's name."""
        return self._core.name

    @property
    def version(self) -> int:
        """The weight version replicas are (being) brought to."""
        return self._core.version

    def __getattr__(self, name: str) -> ServiceEndpoint[Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._endpoint(name, None)

    def _endpoint(self, name: str, session: int | None) -> ServiceEndpoint[Any]:
        options = self._endpoints.get(name)
        if options is None:
            known = ", ".join(sorted(self._endpoints)) or "none"
            raise EndpointNotFoundError(
                f"{self._core.actor_class.__qualname__} has no endpoint '{name}' "
                f"(its endpoints: {known})"
            )
        return ServiceEndpoint(self._core, name, options, session)

    def session(self) -> Session:
        """A sticky session: its calls go to one replica, and move only when that replica
        fails (``async with service.session() as s: await s.generate.route(x)``)."""
        return Session(self, self._run(self._core.open_session))

    def update_weights(
        self, version: int | None = None, *, policy: RefitPolicy | None = None
    ) -> Future[int]:
        """Bring every replica to weight ``version`` (by default the next one) with the
        service's ``load_weights``; resolves with the version once every serving replica
        holds it. A replica being rebuilt meanwhile comes back with it.

        Args:
            version: the new version (an int above the current one).
            policy: ``"pause"`` (new calls wait while replicas load) or ``"rolling"``
                (one replica at a time leaves rotation; the rest serve the old version);
                by default the service's.
        """
        core = self._core
        chosen = policy or core.settings.refit
        if chosen not in ("pause", "rolling"):
            raise ValueError(f"policy must be 'pause' or 'rolling', not {policy!r}")
        with self._asking:  # versions asked for only go up, whichever thread asks
            last = self._asked
            target = last + 1 if version is None else version
            if not isinstance(target, int) or isinstance(target, bool) or target <= last:
                raise ValueError(f"version must be an int above {last}, not {version!r}")
            self._asked = target
        done: Future[int] = Future._new(core.runtime.in_loop_thread)
        core.runtime.call_soon(core.begin_refit, target, chosen, done)
        return done

    def scale(self, replicas: int) -> Future[None]:
        """Keep ``replicas`` replicas: new ones are built and join once ready; removed ones
        take no new calls, finish the ones they hold, then stop."""
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ValueError(f"replicas must be an int of at least 0, not {replicas!r}")
        core = self._core
        done: Future[None] = Future._new(core.runtime.in_loop_thread)
        core.runtime.call_soon(core.begin_scale, replicas, done)
        return done

    def wait_serving(self, replica: int | None = None) -> Future[None]:
        """Resolves once every replica (or replica number ``replica``) is serving or
        failed for good: none is being built, rebuilt after a failure, refitted or
        drained."""
        return self._submit(self._core.wait_serving(replica))

    def replica_actors(self, replica: int) -> Any:
        """The actor mesh of replica ``replica`` as it is now, for calls that bypass the
        service (they are neither routed, counted, retried nor ordered against refits).

        Raises:
            KeyError: there is no such replica, or it has no actors now (it is being
                rebuilt or was stopped).
        """

        def find() -> Any:
            found = self._core.replicas.get(replica)
            if found is None or found.actors is None:
                raise KeyError(f"service '{self.name}' has no replica {replica} with actors now")
            return found.actors

        return self._run(find)

    def stats(self) -> list[ReplicaStats]:
        """Each replica's state, queue depth, calls in flight, answers per second,
        restarts and weight version."""
        return self._run(self._core.stats)

    def stop(self) -> Future[None]:
        """Stop every replica; calls not answered yet fail with `ServiceUnavailableError`."""
        return self._submit(self._core.stop())

    def _submit(self, coro: Any) -> Future[Any]:
        runtime = self._core.runtime
        return from_concurrent(runtime, runtime.submit(coro))

    def _run(self, fn: Callable[[], R]) -> R:
        """``fn()`` on the loop thread (where the service's state lives), waited for."""
        runtime = self._core.runtime
        if runtime.in_loop_thread():
            return fn()

        async def run() -> R:
            return fn()

        return runtime.submit(run()).result()

    async def __aenter__(self) -> Service:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop().get()

    def __repr__(self) -> str:
        core = self._core
        per = "x".join(str(n) for n in core.settings.per_replica.values())
        return f"<Service '{core.name}' {len(core.replicas)} replicas of {per}>"


class ServiceEndpoint(Generic[R]):
    """One endpoint of a service (``service.generate``), or of a session."""

    def __init__(self, core: ServiceCore, name: str, options: Any, session: int | None) -> None:
        self._core = core
        self._name = name
        self._options = options
        self._session = session

    def route(self, *args: Any, **kwargs: Any) -> Future[R]:
        """Call the endpoint on one replica (every rank of it); the replica's answer."""
        return self._call(args, kwargs, answer=False)

    def answer(self, *args: Any, **kwargs: Any) -> Future[Answer[R]]:
        """As `route`, with the weight version and replica that made the answer."""
        return self._call(args, kwargs, answer=True)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any], answer: bool) -> Future[Any]:
        arity = self._options.arity
        if arity is not None:
            arity.check(self._name, args, kwargs)  # a bad call fails here, not on a replica
        core = self._core
        future: Future[Any] = Future._new(core.runtime.in_loop_thread)
        call = ServiceCall(self._name, args, kwargs, self._options.idempotent, self._session,
                           future, answer)  # fmt: skip
        core.runtime.call_soon(core.submit, call)
        return future


class Session:
    """Calls that stay on one replica (its KV cache, say) while it lives; made by
    `Service.session`. Endpoints are reached as on the service: ``s.generate.route(x)``."""

    def __init__(self, service: Service, session: int) -> None:
        self._service = service
        self._id = session

    def __getattr__(self, name: str) -> ServiceEndpoint[Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._service._endpoint(name, self._id)

    def close(self) -> None:
        """Forget the session's replica."""
        core = self._service._core
        core.runtime.call_soon(core.close_session, self._id)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
