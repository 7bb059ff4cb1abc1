"""The adverbs: how one endpoint call reaches a mesh.

Every adverb pickles the arguments once, sends one frame per destination process (the
frame names the ranks hosted there), and registers a request (``_requests``) that turns
replies into the caller's ``Future``, ``ValueMesh`` or stream. A call to a whole mesh
behind a tree of host agents goes by the mesh's plan instead (``_planned``): one frame
per child of this process, whatever the mesh's size.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core import check_message_size, dumps_arguments, headers
from .._core import otel as _otel
from .._exceptions import ActorDiedError
from .._hosts import Runtime
from .._pure import CallbackDispatch, as_dispatch
from ._actor import point_of
from ._choose import WhenFull, check_limits, keyed, submit
from ._future import Future, resolved
from ._planned import PlannedGather, PlannedReduce, by_plan, may_plan
from ._requests import ValueStream, _Chosen, _Gather, _One, _Reduce, _Stream

if TYPE_CHECKING:
    from .._hosts import Plan
    from ._actor_mesh import ActorMesh
    from ._endpoint import Endpoint

__all__ = ["Adverbs"]

R = TypeVar("R")


class Adverbs:
    """The adverbs of one mesh handle; endpoints bound to the mesh delegate here."""

    def __init__(self, mesh: ActorMesh[Any]) -> None:
        self.mesh = mesh

    def _prepare(
        self,
        ep: Endpoint[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ranks: tuple[int, ...] | list[int] | None = None,
    ) -> list[Any]:
        """Check the call where it is written, then pickle its arguments once."""
        self.mesh._state.check_usable(self.mesh._shape.ranks if ranks is None else ranks)
        arity = ep.options.arity
        if arity is not None:
            arity.check(ep.name, args, kwargs)
        payload, buffers = dumps_arguments(args, kwargs)
        parts = [payload, *buffers]
        limit = Runtime.get().config.max_message_bytes
        if len(payload) > limit or buffers:
            check_message_size(parts, limit, f"the call to endpoint '{ep.name}'")
        return parts

    def call(
        self, ep: Endpoint[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[Any]:
        parts = self._prepare(ep, args, kwargs)
        return self._to_every_rank(parts, PlannedGather, _Gather, ep.name)

    def reduce(
        self,
        ep: Endpoint[Any, Any],
        combine: Callable[[Any, Any], Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Future[Any]:
        parts = self._prepare(ep, args, kwargs)
        return self._to_every_rank(parts, PlannedReduce, _Reduce, ep.name, combine)

    def _to_every_rank(
        self,
        parts: list[Any],
        planned: type[PlannedGather] | type[PlannedReduce],
        plain: type[_Gather],
        *made_with: Any,
    ) -> Future[Any]:
        """Send a call to every rank of this handle, by the mesh's plan if it has one
        (``planned(mesh, *made_with)``), else process by process (``plain(...)``)."""
        request: _Gather
        if may_plan(self.mesh):
            request = planned(self.mesh, *made_with)
            if by_plan(self.mesh, functools.partial(request.send_planned, parts=parts)):
                return request.future
            # (no plan after all: it goes process by process)
        else:
            request = plain(self.mesh, *made_with)
        request.send([(path, ranks, parts) for path, ranks in self.mesh._routes()])
        return request.future

    def call_one(
        self, ep: Endpoint[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[Any]:
        shape = self.mesh._shape
        if len(shape) != 1:
            raise ValueError(
                f"call_one needs a mesh of exactly one actor, but '{self.mesh.name}' has "
                f"{len(shape)} actors {shape}; select one first, e.g. "
                f"mesh.slice({', '.join(f'{label}=0' for label in shape.labels)})"
            )
        parts = self._prepare(ep, args, kwargs)
        return self._send_one(ep, shape.ranks[0], parts)

    def _send_one(self, ep: Endpoint[Any, Any], rank: int, parts: list[Any]) -> Future[Any]:
        request = _One(self.mesh, ep.name, rank)
        request.send([(self.mesh._ref.paths[rank], (rank,), parts)])
        return request.future

    def broadcast(
        self,
        ep: Endpoint[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        port: tuple[str, int] | None = None,
    ) -> None:
        """Send without waiting; with a ``port`` (address, id), each actor's answer (or
        error) goes there, else an error goes to the mesh's owner (supervision)."""
        parts = self._prepare(ep, args, kwargs)
        failed: list[tuple[tuple[int, ...], str]] = []

        def cast(plan: Plan) -> bool:
            if plan.by_chain(parts):
                return False
            failed.extend(plan.cast(0, ep.name, parts, port=port))
            return True

        if may_plan(self.mesh) and by_plan(self.mesh, cast):
            if failed:
                self._not_reached(ep, {r: why for ranks, why in failed for r in ranks})
            return
        runtime, mesh_id = Runtime.get(), self.mesh._ref.mesh_id
        dead: dict[int, str] = {}
        outgoing = []
        for path, ranks in self.mesh._routes():
            header = headers.Call(0, mesh_id, ranks, ep.name, None, port, self.mesh._message_view())
            if _otel.ACTIVE:
                header = _otel.with_trace(header)  # the current span's, if any
            if runtime.children.relaunching(path):
                later = functools.partial(_send_later, runtime, path, header, parts)
                if runtime.children.when_back(path, later):
                    continue  # goes out when the restarted process is ready
            try:
                outgoing.append((runtime.connection(path), ranks, header, parts))
            except ActorDiedError as error:
                dead.update(dict.fromkeys(ranks, error.reason))
        for ranks, reason in runtime.send_frames(outgoing):
            dead.update(dict.fromkeys(ranks, reason))
        if dead:
            self._not_reached(ep, dead)

    def _not_reached(self, ep: Endpoint[Any, Any], dead: dict[int, str]) -> None:
        """A broadcast reached the live ranks but not ``dead`` (rank -> why): say which,
        rather than drop it silently."""
        ranks = tuple(sorted(dead))
        points = ", ".join(point_of(self.mesh._ref, rank).brief() for rank in ranks)
        raise ActorDiedError(
            f"broadcast to endpoint '{ep.name}' of mesh '{self.mesh.name}' reached the live "
            f"actors but not {points}: {next(iter(dead.values()))}",
            reason=next(iter(dead.values())),
            ranks=ranks,
        )

    def stream(
        self, ep: Endpoint[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ValueStream[Any]:
        parts = self._prepare(ep, args, kwargs)
        request = _Stream(self.mesh, ep.name)
        request.send([(path, ranks, parts) for path, ranks in self.mesh._routes()])
        return request.stream

    def choose(
        self,
        ep: Endpoint[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: Hashable | None = None,
        max_in_flight: int | None = None,
        when_full: WhenFull | None = None,
    ) -> Future[Any]:
        check_limits(max_in_flight, when_full)
        mesh, state = self.mesh, self.mesh._state
        # choose passes dead ranks over: only the live candidates' failures matter.
        live = [rank for rank in mesh._shape.ranks if rank not in state.dead]
        parts = self._prepare(ep, args, kwargs, live)
        settings = mesh._settings
        if max_in_flight is None:
            max_in_flight = settings.max_in_flight or state.max_in_flight
        full = when_full or settings.when_full or state.when_full
        paths, runtime = mesh._ref.paths, Runtime.get()

        def send(rank: int, started: float) -> Future[Any]:
            runtime.connection(paths[rank])  # raises ActorDiedError before anything is sent
            request = _Chosen(mesh, ep.name, rank, started)
            request.send([(paths[rank], (rank,), parts)])
            return request.future

        policy = keyed(mesh._policy(ep), key, mesh._affinity)
        return submit(state, mesh.name, mesh._shape.ranks, policy, key, max_in_flight, full, send)

    def shard(
        self,
        ep: Endpoint[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        dispatch: Any = None,
    ) -> Future[Any]:
        self.mesh._state.check_usable(self.mesh._shape.ranks)
        chosen = as_dispatch(dispatch if dispatch is not None else ep.options.dispatch)
        if isinstance(chosen, CallbackDispatch):
            result = chosen.invoke(self.mesh, ep.name, args, kwargs)
            if isinstance(result, Future):
                return result
            if inspect.iscoroutine(result):
                # An `async def` dispatch_fn: run it on the runtime's loop, where it can
                # await the calls it makes without blocking any thread.
                from ._future import from_concurrent

                runtime = Runtime.get()
                return from_concurrent(runtime, runtime.submit(result))
            return resolved(result)
        shape, paths = self.mesh._shape, self.mesh._ref.paths
        limit = Runtime.get().config.max_message_bytes
        frames: list[tuple[str, tuple[int, ...], list[Any]]] = []
        for rank, (point_args, point_kwargs) in zip(
            shape.ranks, chosen.split(shape, args, kwargs), strict=True
        ):
            payload, buffers = dumps_arguments(point_args, point_kwargs)
            parts = [payload, *buffers]
            check_message_size(parts, limit, f"the shard of endpoint '{ep.name}' for rank {rank}")
            frames.append((paths[rank], (rank,), parts))
        request = _Gather(self.mesh, ep.name, transform=chosen.collect)
        request.send(frames)
        return request.future


def _send_later(
    runtime: Runtime,
    path: str,
    header: tuple[Any, ...],
    parts: list[Any],
    error: BaseException | None,
) -> None:
    """Send a ``broadcast`` frame held while its process restarted.

    Dropped if the restart failed: the mesh's owner hears of that failure.
    """
    if error is None:
        with contextlib.suppress(ActorDiedError):
            runtime.send(runtime.connection(path), header, parts)
