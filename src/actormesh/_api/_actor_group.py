"""``actor_mesh()``: an actor mesh with a process per actor, in one call (Ray's vocabulary).

Ray's ActorMesh proposal builds a group as ``ActorMesh(Cls, args, kwargs, shape=...)``
with environment variables and resources per actor. Here that is `actor_mesh`: it starts
one process per point of the shape (the number of actors is the *product* of the sizes),
places each (its own CPUs, its own GPUs), spawns the actors, and hands back a mesh that
owns its processes, so stopping the mesh stops them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .._hosts import Runtime
from .._pure import ChoosePolicy, Placement, plan, policy_from, resources_from
from .._shape import Point, Shape
from ._actor import Actor
from ._choose import WhenFull, check_limits
from ._future import Future, from_concurrent
from ._host_resources import pin, visible_gpus
from ._mesh_state import MeshState
from ._proc_mesh import proc_mesh

__all__ = ["actor_mesh"]

T = TypeVar("T")

EnvSpec = Mapping[str, str] | Callable[[Point], Mapping[str, str]]


def actor_mesh(
    actor_class: type[T],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    shape: int | Sequence[int] | Mapping[str, int],
    name: str | None = None,
    env: EnvSpec | None = None,
    cpus_per_actor: int | None = None,
    gpus_per_actor: int | None = None,
    resources_per_actor: Mapping[str, float] | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    choose: ChoosePolicy | str | None = None,
    max_in_flight: int | None = None,
    when_full: WhenFull = "wait",
) -> Future[T]:
    """Start a process per actor and spawn ``actor_class(*args, **kwargs)`` in each.

    ``mesh = await actor_mesh(Trainer, (1e-3,), shape={"dp": 2, "tp": 2})`` gives a
    mesh of 4 actors with dimensions ``dp`` and ``tp``. The future's value is typed as
    the actor class, so ``mesh.step.call_one(x)`` type-checks as the endpoint's result.
    ``ActorMesh(Cls, args, kwargs, shape=...)`` does the same and blocks until ready.

    Each process sees ``ACTORMESH_RANK``, ``ACTORMESH_COORDS`` (JSON) and
    ``ACTORMESH_WORLD_SIZE`` in its environment, plus whatever ``env`` gives it.

    Args:
        actor_class: a subclass of ``Actor``.
        args: positional arguments of its constructor (a tuple or list).
        kwargs: keyword arguments of its constructor.
        shape: an int (one dimension ``dim0``), a tuple of sizes (``dim0``, ``dim1``, ...)
            or a mapping of dimension name to size.
        name: the mesh's name in messages and output prefixes (default: the class name).
        env: environment variables for every actor, or a function of the actor's
            coordinates giving each its own (``lambda p: {"SHARD": str(p["dp"])}``).
            They override those computed from ``cpus_per_actor``/``gpus_per_actor``.
        cpus_per_actor: pin each actor's process to this many CPUs of its own (disjoint
            sets, taken in order from the CPUs this process may use); also sets
            ``OMP_NUM_THREADS``. ``None``: no pinning.
        gpus_per_actor: give each actor this many GPUs of its own through
            ``CUDA_VISIBLE_DEVICES`` (0 hides every GPU). ``None``: leave it inherited.
        resources_per_actor: Ray-style ``{"CPU": n, "GPU": m}``, instead of the two above.
        runtime_env: Ray-style ``{"env_vars": {...}}``, merged under ``env``.
        choose: the mesh's default ``choose`` policy (name or object; default
            ``"power_of_two"``).
        max_in_flight: the default bound on each rank's calls in flight for ``choose``.
        when_full: what ``choose`` does when every rank is at the bound: ``"wait"`` or
            ``"error"``.

    Raises:
        TypeError: ``actor_class`` is not an ``Actor`` subclass, or ``args``/``kwargs``
            have the wrong type.
        ValueError: a bad shape, unknown resource or ``runtime_env`` key, or not enough
            CPUs or GPUs for every actor (raised here, before anything starts).
    """
    if not (isinstance(actor_class, type) and issubclass(actor_class, Actor)):
        raise TypeError(f"actor_mesh needs a subclass of actormesh.Actor, got {actor_class!r}")
    if not isinstance(args, tuple | list):
        raise TypeError(
            f"args must be a tuple or list of constructor arguments, not {type(args).__name__}"
            f" (for one argument write ({args!r},))"
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a mapping, not {type(kwargs).__name__}")
    mesh_shape = Shape.of(shape)
    check_limits(max_in_flight, when_full)
    if isinstance(choose, str):
        policy_from(choose)  # an unknown name fails here, not at the first choose
    if resources_per_actor is not None:
        if cpus_per_actor is not None or gpus_per_actor is not None:
            raise TypeError("give resources_per_actor or cpus/gpus_per_actor, not both")
        cpus_per_actor, gpus_per_actor = resources_from(resources_per_actor)
    placements = plan(
        len(mesh_shape),
        cpus_per_actor=cpus_per_actor,
        gpus_per_actor=gpus_per_actor,
        cpus=sorted(os.sched_getaffinity(0)),
        gpus=visible_gpus() if gpus_per_actor else [],
    )
    env_of = _environment(env, runtime_env, placements)
    mesh_name = name or actor_class.__name__
    runtime = Runtime.get()

    async def start() -> T:
        procs = await proc_mesh(mesh_shape.extent, env=env_of, name=mesh_name)
        try:
            for child, placement in zip(procs._processes.children, placements):
                if placement.cpus:
                    pin(child.pid, placement.cpus)
            mesh = procs.spawn(mesh_name, actor_class, *args, **(kwargs or {}))
            await mesh.initialized
        except BaseException:
            await procs.stop()
            raise
        state: MeshState = mesh._state  # type: ignore[attr-defined]
        state.owned = procs
        if choose is not None:
            state.choose = choose
        state.max_in_flight = max_in_flight
        state.when_full = when_full
        return mesh

    return from_concurrent(runtime, runtime.submit(start()))


def _environment(
    env: EnvSpec | None,
    runtime_env: Mapping[str, Any] | None,
    placements: list[Placement],
) -> Callable[[Point], Mapping[str, str]]:
    """Each process' extra environment: placement, then ``runtime_env``, then ``env``."""
    ray_vars: dict[str, str] = {}
    if runtime_env is not None:
        unknown = sorted(set(runtime_env) - {"env_vars"})
        if unknown:
            raise ValueError(
                f"runtime_env supports only 'env_vars' here, not {unknown}: the actors run "
                "in this Python environment"
            )
        ray_vars = _strings(runtime_env.get("env_vars") or {}, "runtime_env['env_vars']")
    fixed = {} if env is None or callable(env) else _strings(env, "env")

    def of(point: Point) -> Mapping[str, str]:
        given = _strings(env(point), "env(point)") if callable(env) else fixed
        return {**placements[point.rank].env(), **ray_vars, **given}

    return of


def _strings(env: Mapping[str, Any], what: str) -> dict[str, str]:
    if not isinstance(env, Mapping):
        raise TypeError(f"{what} must be a mapping of str to str, not {type(env).__name__}")
    bad = [k for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise TypeError(f"{what} must map str to str; these entries do not: {bad}")
    return dict(env)
