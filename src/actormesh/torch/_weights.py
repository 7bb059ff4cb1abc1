"""Weight sync: move a model's ``state_dict`` from one mesh (trainers) to another (generators).

The controller only starts the transfer; the tensors go straight from the trainer
processes to the generator processes (across hosts, a trainer's part large enough for
``Config.bulk_threshold`` goes down a chain of the generators' host agents, leaving the
trainer once, and each agent lends its generators one shared-memory copy). With
replicated trainers (data parallel), the tensors are split into one part per trainer by
size, and each trainer sends its part to every generator at once (one pickling per part;
on one host the runtime's out-of-band path carries the bytes, without copies into the
pickle). With sharded trainers each sends the tensors it holds. A generator stages the
parts of a version and applies them all in one message of its mailbox, so no endpoint
ever runs on half-updated weights, then records the version (`weights_version`).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from actormesh._api import ActorHost, Future, context, from_concurrent, run_in_actors
from actormesh._exceptions import ActorMeshError
from actormesh._hosts import Progress, Runtime
from actormesh._shape import Point, ValueMesh

if TYPE_CHECKING:
    import torch

__all__ = ["SyncReport", "sync_weights", "weights_version", "weights_versions"]

StateGetter = str | Callable[[Any], Mapping[str, "torch.Tensor"]]
StateSetter = str | Callable[[Any, dict[str, "torch.Tensor"], int], None]

# Generator side, per actor object: the version its weights are at, and the parts of a
# version still being received.
_VERSIONS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_STAGED: weakref.WeakKeyDictionary[Any, tuple[int, dict[int, dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class SyncReport:
    """What one `sync_weights` moved.

    Attributes:
        version: the version tag the generators now hold.
        bytes: size of the state dict sent (one copy of the model).
        delivered: bytes received over all generator ranks.
        seconds: wall time from the call to the last generator applying the weights.
    """

    version: int
    bytes: int
    delivered: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        """Model megabytes (10^6 bytes) per second: ``bytes / seconds``."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else float("inf")


def sync_weights(
    source: Any,
    target: Any,
    *,
    version: int,
    get_state: StateGetter = "model",
    set_state: StateSetter = "model",
    layout: Literal["replicated", "sharded"] = "replicated",
    select: Callable[[str, Point], bool] | None = None,
) -> Future[SyncReport]:
    """Send the weights of the actors of ``source`` to every actor of ``target``.

    ``report = await sync_weights(trainers, generators, version=step)``. The call waits
    until every generator applied the weights; meanwhile both meshes keep their message
    order (the sync runs between messages, never inside one).

    Args:
        source: the trainer mesh.
        target: the generator mesh.
        version: the tag the generators will hold (`weights_version`).
        get_state: in a trainer, the attribute holding the model (its ``state_dict()``
            is sent; a ``DistributedDataParallel`` wrapper is looked through) or a
            function ``get_state(actor) -> {name: tensor}``.
        set_state: in a generator, the attribute holding the model (weights are loaded
            with ``load_state_dict``, copied into its parameters) or a function
            ``set_state(actor, state, version)``.
        layout: ``"replicated"`` (every trainer holds the whole model: each sends a part)
            or ``"sharded"`` (each trainer sends all it holds; together they are the model).
        select: ``select(name, point)`` says whether the generator at ``point`` needs
            tensor ``name`` (a tensor-parallel generator needs only its shard's); the
            default sends everything to everyone.
    """
    if layout not in ("replicated", "sharded"):
        raise ValueError(f"layout must be 'replicated' or 'sharded', not {layout!r}")
    runtime = Runtime.get()

    async def run() -> SyncReport:
        started = time.perf_counter()
        order = {root: part for part, root in enumerate(source._shape.ranks)}
        # One call per trainer, so a long sync can say how many have sent their part.
        trainers = [source.slice(**dict(point)) for point in source._shape.points()]
        progress = Progress(
            runtime.loop,
            f"weight sync v{version}",
            "trainers sent",
            len(trainers),
            runtime.progress_mode,
        )
        sent: list[tuple[int, int]] = []
        # The generators' host agents, so each trainer sends its part down a chain of
        # them, once, rather than to every generator process (docs/multihost.md).
        agents = runtime.bulk.agents_of(target._ref.paths)
        pending = [
            asyncio.ensure_future(
                _awaited(
                    run_in_actors(
                        one,
                        _push,
                        target,
                        version,
                        order,
                        get_state,
                        set_state,
                        layout,
                        select,
                        agents,
                    )
                )
            )
            for one in trainers
        ]
        try:
            for done in asyncio.as_completed(pending):
                sent.extend((await done).values())
                progress.update(len(sent))
        except ActorMeshError as error:
            # The other trainers' parts end too (sent or failed) before the sync fails.
            await asyncio.gather(*pending, return_exceptions=True)
            error.add_note(
                f"sync_weights v{version}: the generators reached may hold v{version} "
                "already; without the dead ones, sync a slice of the live ones"
            )
            raise
        finally:
            progress.done()
        seconds = time.perf_counter() - started
        runtime.record_event(
            "weights",
            mesh=target.name,
            message=f"weights v{version} synced from '{source.name}'",
            version=version,
            source=source.name,
            seconds=seconds,
        )
        return SyncReport(
            version,
            sum(nbytes for nbytes, _ in sent),
            sum(delivered for _, delivered in sent),
            seconds,
        )

    return from_concurrent(runtime, runtime.submit(run()))


def weights_version(actor: Any) -> int | None:
    """Inside a generator: the version of the weights ``actor`` holds (None before any)."""
    return _VERSIONS.get(actor)


def weights_versions(mesh: Any) -> Future[ValueMesh[int | None]]:
    """From anywhere: the weights version each actor of ``mesh`` holds."""
    return run_in_actors(mesh, _version_in_actor)


def _version_in_actor(host: ActorHost) -> int | None:
    return _VERSIONS.get(host.instance)


def _state_of(actor: Any, get_state: StateGetter) -> Mapping[str, torch.Tensor]:
    if callable(get_state):
        return get_state(actor)
    model = getattr(actor, get_state)
    # DistributedDataParallel and similar wrappers keep the model as .module; its own
    # state_dict would prefix every name with "module.".
    inner = getattr(model, "module", None)
    if inner is not None and hasattr(inner, "state_dict"):
        model = inner
    state: Mapping[str, torch.Tensor] = model.state_dict()
    return state


def partition(sizes: Mapping[str, int], parts: int) -> list[list[str]]:
    """Split tensor names into ``parts`` lists of nearly equal total size, deterministically.

    Largest first, each to the lightest part so far (ties: lowest part); every trainer
    computes the same split from the same names and sizes.
    """
    loads = [0] * parts
    split: list[list[str]] = [[] for _ in range(parts)]
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        lightest = min(range(parts), key=lambda i: (loads[i], i))
        split[lightest].append(name)
        loads[lightest] += sizes[name]
    return split


def _push(
    host: ActorHost,
    target: Any,
    version: int,
    order: Mapping[int, int],
    get_state: StateGetter,
    set_state: StateSetter,
    layout: str,
    select: Callable[[str, Point], bool] | None,
    agents: dict[str, tuple[str, str]],
) -> tuple[int, int]:
    """In a trainer: send its part to the generators; ``(bytes of the part, delivered)``.

    ``agents``: the generators' host agents (``Bulk.agents_of``): a part large enough
    goes down a chain of them, each byte leaving this process once.
    """
    Runtime.get().bulk.route(agents)
    state = _state_of(host.instance, get_state)
    # The actor's place in its whole mesh: the order is keyed by it, whatever slice
    # this system call was sent to (current_rank() would be relative to that slice).
    part, parts = order[context().actor_instance.rank.rank], len(order)
    if layout == "replicated":
        sizes = {name: _nbytes(t) for name, t in state.items()}
        names = partition(sizes, parts)[part]
    else:
        names = list(state)
    tensors = {name: _sendable(state[name]) for name in names}
    nbytes = sum(_nbytes(t) for t in tensors.values())
    strict = select is None and layout == "replicated"
    if select is None:
        run_in_actors(target, _receive, version, part, parts, tensors, set_state, strict).get()
        return nbytes, nbytes * len(target._shape)
    delivered, pending = 0, []
    for point in target._shape.points():
        chosen = {name: t for name, t in tensors.items() if select(name, point)}
        delivered += sum(_nbytes(t) for t in chosen.values())
        one = target.slice(**dict(point))
        pending.append(run_in_actors(one, _receive, version, part, parts, chosen, set_state, False))
    for future in pending:
        future.get()
    return nbytes, delivered


def _receive(
    host: ActorHost,
    version: int,
    part: int,
    parts: int,
    tensors: dict[str, Any],
    set_state: StateSetter,
    strict: bool,
) -> bool:
    """In a generator: stage one part; apply the version once all parts are in."""
    actor = host.instance
    staged_version, staged = _STAGED.get(actor, (version, {}))
    if staged_version != version:
        staged = {}  # parts of an older sync that never completed
    staged[part] = tensors
    if len(staged) < parts:
        _STAGED[actor] = (version, staged)
        return False
    _STAGED.pop(actor, None)
    state = {name: t for piece in staged.values() for name, t in piece.items()}
    if callable(set_state):
        set_state(actor, state, version)
    else:
        import torch

        model = getattr(actor, set_state)
        with torch.no_grad():
            model.load_state_dict(state, strict=strict)
    _VERSIONS[actor] = version
    return True


def _sendable(tensor: torch.Tensor) -> torch.Tensor:
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.to("cpu")
    return data


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel() * tensor.element_size())


async def _awaited(future: Future[ValueMesh[tuple[int, int]]]) -> ValueMesh[tuple[int, int]]:
    return await future
