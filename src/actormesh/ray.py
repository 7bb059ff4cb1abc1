"""The Ray "ActorMesh API" proposal (ray-project/ray#54760) in its own spelling, on Ray.

A program written against the proposal runs by changing one import,
``from ray.actor_mesh import ActorMesh, method`` to ``from actormesh.ray import ...``::

    mesh = ActorMesh(Test, (), {}, shape=(3,))
    refs = mesh.methods.f.all(1)  # a list of Ray ObjectRefs, in rank order
    one = mesh.methods.f.choose(1)  # one ObjectRef, from a lightly loaded actor
    out = mesh.methods.process.shard([1, 2, 3, 4, 5, 6], 5)  # what dispatch_fn returns

Each rank is a real Ray actor of the user's class (``mesh.actors[i].f.remote()`` is
plain Ray), so every result is a real ``ObjectRef``: ``ray.get`` it, ``ray.wait`` on it,
pass it to Ray tasks. actormesh adds what the proposal's review asked for: ``mesh.f.all()``
without ``.methods``; ``mesh[1, 0]`` (that actor's handle, ``.foo.remote()``) and
``mesh[1, :]`` (a sub-mesh); a load-aware ``choose`` with pluggable policies (actormesh's
own: ``power_of_two`` by default, ``least_loaded``, ``round_robin``, ``random``...), which
counts each rank's calls in flight from the ObjectRefs of every call made through the mesh
in this process (``choose``, ``all()``, ``mesh.actors[i].f.remote()``, ``mesh[1, 0]``);
and ``resources_per_actor``
(fractional and custom resources) honoured. Shapes, slicing and policies are actormesh's
pure layer; Ray schedules the actors and carries the calls. See docs/from-ray.md.
"""

from __future__ import annotations

import copy
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ._pure import ChoosePolicy, NoCapacity, policy_from
from ._shape import Shape

__all__ = ["ActorMesh", "method"]

T = TypeVar("T")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("actormesh.ray needs Ray: pip install ray") from None
    return ray


def method(
    method: Callable[..., Any] | None = None,
    dispatch_fn: Callable[..., Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Mark an actor method: ``@method``, ``@method()``, ``@method(dispatch_fn=fn)``; any
    other keyword (``num_returns``, ``concurrency_group``) goes to ``ray.method``.

    ``dispatch_fn(mesh, method_name, *args, **kwargs)`` is what ``.shard`` runs.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        marked: Any = _ray().method(**kwargs)(fn) if kwargs else fn
        marked._dispatch_fn = dispatch_fn
        return marked  # type: ignore[no-any-return]

    return decorate(method) if method is not None else decorate


class _Load:
    """Calls in flight per rank, counted from the ObjectRefs of every call made through the
    mesh's actor handles (`_count_calls`), and
    the ranks whose actor was found dead (a call of theirs failed with Ray's
    ``ActorDiedError``, not a temporary ``ActorUnavailableError``): ``choose`` does not
    pick those while that holds (a later call of theirs that succeeds clears it).

    These are facts of this process: a mesh pickled to a Ray task or actor starts there
    with none (its calls are counted where they are made).
    """

    def __init__(self, count: int) -> None:
        self.in_flight = [0] * count
        self.dead: set[int] = set()
        self.killed: set[int] = set()  # by kill(): dead whatever a late callback says
        # Notified when a call finishes: a `choose` waiting for capacity looks again.
        self.changed = threading.Condition()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Load, (len(self.in_flight),))

    def watch(self, rank: int, ref: Any) -> None:
        """Count ``ref``'s call (already added to ``in_flight[rank]``) done when it is:
        an ObjectRef, a list of them (``num_returns=n``), or a streaming generator."""
        first = (ref or [None])[0] if isinstance(ref, list) else ref
        if isinstance(first, _ray().ObjectRefGenerator):
            first = first.completed()  # ready when the generator's task has ended
        if first is None:  # num_returns=0: nothing to wait for
            self.finished(rank, None)
            return
        first.future().add_done_callback(lambda done: self.finished(rank, _outcome(done)))

    def gone(self, ranks: Sequence[int]) -> None:
        """``ranks`` were killed: ``choose`` never picks them again."""
        with self.changed:
            self.killed.update(ranks)
            self.dead.update(ranks)
            self.changed.notify_all()

    def finished(self, rank: int, error: BaseException | None) -> None:
        died = isinstance(error, _ray().exceptions.ActorDiedError)
        with self.changed:
            self.in_flight[rank] -= 1
            if died:
                self.dead.add(rank)
            elif error is None and rank not in self.killed:
                self.dead.discard(rank)
            self.changed.notify_all()


# Set while ``choose`` makes its call: choose counted it already, when it picked the rank
# under the load's lock (so concurrent chooses see it at once).
_CHOOSING = threading.local()


def _count_calls(actor: Any, rank: int, load: _Load) -> None:
    """Count every call made through the Ray handle ``actor`` in ``load``.

    Every method call of a Ray handle (``.remote()``, ``.options(...).remote()``) goes
    through ``ActorHandle._actor_method_call``; shadowing it on this one handle object
    counts the calls of ``all()``, of ``mesh.actors[i]`` and of ``mesh[1, 0]`` too, while
    the handle stays a plain ``ActorHandle`` (``ray.kill`` and pickling see no change).
    The handle is held weakly, so this adds no reference cycle that would keep the actor
    alive longer.
    """
    handle = weakref.ref(actor)
    plain = type(actor)._actor_method_call

    def counted(*args: Any, **kwargs: Any) -> Any:
        me = handle()
        if me is None:  # (cannot happen while the method is reached through the handle)
            raise RuntimeError("the actor handle is gone")
        if getattr(_CHOOSING, "active", False):
            return plain(me, *args, **kwargs)
        with load.changed:
            load.in_flight[rank] += 1
        try:
            refs = plain(me, *args, **kwargs)
        except BaseException as error:
            load.finished(rank, error)
            raise
        load.watch(rank, refs)
        return refs

    actor._actor_method_call = counted


def _probe(ray: Any, actor: Any) -> Any:
    """A no-op call to a killed ``actor``; ``None`` when its queue is full
    (``max_pending_calls``) and it cannot be probed yet."""
    try:
        return actor.__ray_ready__.remote()
    except ray.exceptions.PendingCallsLimitExceeded:
        return None


def _died(ray: Any, probe: Any, deadline: float | None) -> bool:
    """Whether ``probe`` failed because its actor is dead (waiting until ``deadline``)."""
    if probe is None:
        return False
    try:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ray.get(probe, timeout=wait)
    except ray.exceptions.RayActorError:
        return True
    except ray.exceptions.GetTimeoutError:
        pass
    return False


def _outcome(done: Any) -> BaseException | None:
    try:
        return done.exception()  # type: ignore[no-any-return]
    except BaseException as error:  # cancelled
        return error


class _Method:
    """One method of every actor of a mesh: ``all``, ``choose``, ``shard``."""

    def __init__(self, mesh: ActorMesh[Any], name: str) -> None:
        self._mesh = mesh
        self._name = name

    def all(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Call every actor; a list of ObjectRefs, in rank order (does not wait)."""
        return [getattr(actor, self._name).remote(*args, **kwargs) for actor in self._mesh.actors]

    def choose(self, *args: Any, **kwargs: Any) -> Any:
        """Call one live actor, picked by the mesh's policy from its calls in flight; its
        ObjectRef. Does not wait for the call; with ``choose="work_queue"`` and every
        actor at capacity, waits for one of their calls to finish first."""
        mesh = self._mesh
        if not mesh._ranks:
            raise IndexError("cannot choose from an empty mesh")
        load = mesh._load
        with load.changed:
            while True:
                live = [rank for rank in mesh._ranks if rank not in load.dead]
                if not live:
                    raise _ray().exceptions.RayActorError(
                        error_msg=f"every actor of {mesh!r} that choose may pick has died"
                    )
                try:
                    rank = mesh._policy.choose(live, [load.in_flight[r] for r in live])
                except NoCapacity:
                    # A work queue with every actor busy: the call waits for one to finish.
                    load.changed.wait()
                    continue
                # Counted before the lock is let go: a concurrent choose sees this call.
                load.in_flight[rank] += 1
                break
        _CHOOSING.active = True  # counted above, not again by the handle
        try:
            ref = getattr(mesh._all_actors[rank], self._name).remote(*args, **kwargs)
        except BaseException as error:
            load.finished(rank, error)
            raise
        finally:
            _CHOOSING.active = False
        load.watch(rank, ref)
        return ref

    def shard(self, *args: Any, **kwargs: Any) -> Any:
        """What the method's ``dispatch_fn(mesh, name, *args, **kwargs)`` returns."""
        dispatch = getattr(getattr(self._mesh._actor_cls, self._name, None), "_dispatch_fn", None)
        if dispatch is None:
            # AssertionError, as the proposal raises: programs may catch that.
            raise AssertionError(
                f"{self._name}.shard() needs a dispatch_fn: declare the method with "
                f"@method(dispatch_fn=fn), fn(mesh, method_name, *args, **kwargs)"
            )
        return dispatch(self._mesh, self._name, *args, **kwargs)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """On a one-actor mesh: that actor's call (``mesh[1, :1].f.remote()``)."""
        if self._mesh.num_actors != 1:
            raise ValueError(
                f"remote() needs a mesh of one actor; this one has {self._mesh.num_actors}: "
                "use all() or choose(), or index one actor (mesh[1, 0])"
            )
        return getattr(self._mesh.actors[0], self._name).remote(*args, **kwargs)


class _Methods:
    """``mesh.methods``: the actor class' methods, each over the whole mesh."""

    def __init__(self, mesh: ActorMesh[Any]) -> None:
        self._mesh = mesh

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Method(self._mesh, name)


def _user_class(actor_cls: Any) -> tuple[type, dict[str, Any]]:
    """The user's class, and the options given to ``@ray.remote(...)`` if it was decorated
    (``max_concurrency``, ``num_cpus``...): the mesh's actors get them too."""
    # A class already decorated with @ray.remote: the user's class is the base of the
    # one Ray made (ray.remote refuses to wrap it twice).
    metadata = getattr(actor_cls, "__ray_metadata__", None)
    if metadata is not None:
        options = dict(getattr(actor_cls, "_default_options", None) or {})
        return metadata.modified_class.__bases__[0], options
    if not isinstance(actor_cls, type):
        raise TypeError(f"ActorMesh needs a class, not {actor_cls!r}")
    return actor_cls, {}


def _shape_of(shape: int | Sequence[int] | Mapping[str, int]) -> tuple[Any, Shape]:
    if isinstance(shape, bool) or not isinstance(shape, int | Sequence | Mapping):
        raise TypeError(
            f"shape must be an int, a tuple of ints or a dict of label to int, not {shape!r}"
        )
    given: Any = (shape,) if isinstance(shape, int) else shape
    if isinstance(given, Mapping):
        return given, Shape.from_dims(tuple(given), tuple(given.values()))
    sizes = tuple(given)
    return given, Shape.from_dims(tuple(f"dim{i}" for i in range(len(sizes))), sizes)


def _options(resources: Mapping[str, float] | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    custom = dict(resources or {})
    if "CPU" in custom:
        options["num_cpus"] = custom.pop("CPU")
    if "GPU" in custom:
        options["num_gpus"] = custom.pop("GPU")
    if custom:
        options["resources"] = custom
    return options


class ActorMesh(Generic[T]):
    """Actors of one class in a shape, each a Ray actor (see the module docstring).

    Args:
        actor_cls: a plain class (one decorated with ``@ray.remote`` is unwrapped).
        args: its constructor's positional arguments (every rank gets the same).
        kwargs: its constructor's keyword arguments.
        shape: ``n``, a tuple of sizes, or a dict of dimension name to size; the mesh has
            their product of actors, ranked row-major.
        resources_per_actor: Ray resources each actor reserves: ``{"CPU": 0.5, "GPU": 1,
            "my_resource": 1}`` (fractions allowed). A request the cluster cannot meet
            leaves actors pending, as Ray does.
        runtime_env: Ray's runtime environment for every actor; its ``env_vars`` gain
            ``RAY_ACTOR_MESH_RANK`` (the rank, as a string) and ``RAY_ACTOR_MESH_SIZE``.
        choose: the ``choose`` policy: a name (``"power_of_two"``, ``"least_loaded"``,
            ``"round_robin"``, ``"random"``) or a policy object.
    """

    def __init__(
        self,
        actor_cls: Callable[..., T],
        args: Any,
        kwargs: Any,
        shape: int | Sequence[int] | Mapping[str, int],
        resources_per_actor: Mapping[str, float] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        *,
        choose: ChoosePolicy | str = "power_of_two",
    ) -> None:
        ray = _ray()
        self._actor_cls, decorated = _user_class(actor_cls)
        self.shape, self._shape = _shape_of(shape)
        if choose == "affinity":
            raise ValueError(
                "choose='affinity' picks by a key, and actormesh.ray's choose() takes none: "
                "use actormesh's own meshes for keyed calls, or another policy"
            )
        self._policy = policy_from(choose)  # a misspelt policy fails before any actor starts
        count = math.prod(self._shape.sizes)
        environment = copy.deepcopy(dict(runtime_env or decorated.get("runtime_env") or {}))
        variables = dict(environment.get("env_vars", {}))
        # Ray takes concurrency groups when the class is made remote, not in .options().
        groups = decorated.pop("concurrency_groups", None)
        make_remote = ray.remote(concurrency_groups=groups) if groups else ray.remote
        remote = make_remote(self._actor_cls)
        reserved = {**decorated, **_options(resources_per_actor)}
        self._all_actors = []
        for rank in range(count):
            env_vars = {
                **variables,
                "RAY_ACTOR_MESH_RANK": str(rank),
                "RAY_ACTOR_MESH_SIZE": str(count),
            }
            options = {**reserved, "runtime_env": {**environment, "env_vars": env_vars}}
            self._all_actors.append(remote.options(**options).remote(*args, **(kwargs or {})))
        self._ranks = tuple(range(count))
        self._load = _Load(count)
        self._count_calls()

    def _count_calls(self) -> None:
        for rank, actor in enumerate(self._all_actors):
            _count_calls(actor, rank, self._load)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in a Ray task or actor: its handles are new objects, counted there.
        self.__dict__.update(state)
        self._count_calls()

    def _view(self, shape: Shape) -> Any:
        if not shape.labels:
            return self._all_actors[shape.ranks[0]]  # one actor: its own handle
        view: ActorMesh[T] = ActorMesh.__new__(ActorMesh)
        view.__dict__.update(self.__dict__)
        view._shape, view._ranks = shape, shape.ranks
        named = isinstance(self.shape, Mapping)
        view.shape = shape.extent if named else tuple(shape.sizes)
        return view

    @property
    def methods(self) -> Any:
        """The actor class' methods, each over every actor: ``mesh.methods.f.all(x)``."""
        return _Methods(self)

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in rank order."""
        return [self._all_actors[rank] for rank in self._ranks]

    @property
    def num_actors(self) -> int:
        """How many actors the mesh has."""
        return len(self._ranks)

    def in_flight(self) -> list[int]:
        """The calls in flight to each actor of this mesh, in rank order, as this process
        counts them (what ``choose`` weighs): every call made through the mesh, from when
        it is made until its result is ready."""
        load = self._load
        with load.changed:
            return [load.in_flight[rank] for rank in self._ranks]

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no call counted by ``in_flight`` is in flight to this mesh's actors
        (a result is counted done by a callback of Ray's, a moment after ``ray.get``
        returned it); False if ``timeout`` seconds passed first."""
        load = self._load
        with load.changed:
            return load.changed.wait_for(
                lambda: not any(load.in_flight[rank] for rank in self._ranks), timeout
            )

    def __getattr__(self, name: str) -> _Method:
        # ``mesh.f.all()`` without ``.methods``, for the class' own methods. (Read through
        # __dict__: pickle probes attributes of an instance it has not filled in yet.)
        cls = self.__dict__.get("_actor_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        if name.startswith("_") or not callable(getattr(cls, name, None)):
            raise AttributeError(f"{cls.__qualname__} has no method {name!r} to call on the mesh")
        return _Method(self, name)

    def __getitem__(self, key: Any) -> Any:
        """``mesh[1, 0]``: that actor's Ray handle; ``mesh[1, :]``: a sub-mesh."""
        return self._view(self._shape.index(key))

    def slice(self, **dims: Any) -> Any:
        """The actors at these coordinates (dimension names of a dict shape, else
        ``dim0``, ``dim1``...)."""
        return self._view(self._shape.slice(**dims))

    def kill(self, timeout: float | None = 60.0) -> None:
        """End every actor of the mesh (``ray.kill``) and return once each is dead.

        ``ray.kill`` only asks the GCS to end the actor, and a call sent right after it can
        still reach the actor and be answered; so each actor is probed until a probe fails
        with ``RayActorError``. Raises ``TimeoutError`` if one is not seen dead within
        ``timeout`` seconds (``None``: no limit).
        """
        ray = _ray()
        left = list(self.actors)
        for actor in left:
            ray.kill(actor)
        self._load.gone(self._ranks)  # shared with the mesh this one was sliced from
        deadline = None if timeout is None else time.monotonic() + timeout
        while left:
            probes = [(actor, _probe(ray, actor)) for actor in left]
            left = [actor for actor, probe in probes if not _died(ray, probe, deadline)]
            if left and deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{len(left)} of the mesh's actors not seen dead {timeout:g} s after ray.kill"
                )
            if left and all(probe is None for _, probe in probes):
                time.sleep(0.01)  # every queue still full: nothing to wait on but time

    def __len__(self) -> int:
        return self.num_actors

    def __repr__(self) -> str:
        return f"<actormesh.ray.ActorMesh of {self._actor_cls.__qualname__} {self._shape}>"
