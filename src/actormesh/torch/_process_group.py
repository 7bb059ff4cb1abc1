"""A ``torch.distributed`` process group across the actors of a mesh, set up in one call.

The controller asks every actor (through the runtime's system endpoint, so the actor class
declares nothing) for its host and GPUs; the first actor also starts the group's
``TCPStore`` on a port the kernel picks, so there is no port to guess and no race for it.
Then every actor sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` in its process and joins the group on its own thread.
The group is destroyed when the mesh stops (or with `destroy_process_group`); a process
that exits takes its group with it.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import Any

from actormesh._api import ActorHost, Future, context, from_concurrent, run_in_actors
from actormesh._hosts import Runtime
from actormesh._transport import (
    format_tcp,
    host_id,
    interface_of,
    parse_tcp,
    route_source,
    tcp_part,
)

__all__ = ["destroy_process_group", "setup_process_group"]

# Worker side: the TCPStore server of a group being set up, by mesh id, between the two
# system calls (the group keeps its own reference once initialised).
_STORES: dict[str, Any] = {}


def setup_process_group(
    mesh: Any, *, backend: str | None = None, timeout: float = 120.0
) -> Future[None]:
    """Make the actors of ``mesh`` one ``torch.distributed`` group (the default group).

    ``await setup_process_group(trainers)``; afterwards a ``def`` endpoint can wrap its
    model in ``DistributedDataParallel`` or call ``torch.distributed.all_reduce``. Ranks
    follow the mesh handle's order (row-major over its dimensions).

    Args:
        mesh: an actor mesh (or a slice of one): one actor per process.
        backend: ``"gloo"``, ``"nccl"``, ...; by default ``"nccl"`` when every actor sees
            a GPU, else ``"gloo"``. With nccl each process uses GPU ``LOCAL_RANK`` of
            those it sees (GPU 0 when it sees one, as with ``gpus_per_actor=1``).
        timeout: seconds the rendezvous and later collectives may take.

    Raises (through the future):
        RuntimeError: a process of the mesh already has a default process group (checked
            before any actor joins, so none is left waiting).
        ActorError: joining failed in an actor (the others wait up to ``timeout``).
    """
    runtime = Runtime.get()
    return from_concurrent(runtime, runtime.submit(_setup(mesh, backend, timeout)))


def destroy_process_group(mesh: Any) -> Future[None]:
    """Leave and destroy the group of every actor of ``mesh`` (a no-op where there is none)."""
    runtime = Runtime.get()

    async def destroy() -> None:
        await run_in_actors(mesh, _destroy_in_actor)

    return from_concurrent(runtime, runtime.submit(destroy()))


async def _setup(mesh: Any, backend: str | None, timeout: float) -> None:
    ranks = mesh._shape.ranks  # root ranks, in this handle's order
    key = mesh._ref.mesh_id
    probes = await run_in_actors(mesh, _probe, ranks[0], key, timeout)
    infos: dict[int, dict[str, Any]] = {
        root: info for root, info in zip(ranks, probes.values(), strict=True)
    }
    taken = [point for point, info in probes.items() if info["initialized"]]
    if taken:
        # Checked before anyone joins: a rank that failed to join would leave the others
        # waiting for it until the timeout.
        await run_in_actors(mesh.slice(**dict(probes.shape.point(0))), _drop_store, key)
        where = ", ".join(point.brief() for point in taken)
        if all(probes.item(**dict(point))["own"] for point in taken):
            raise RuntimeError(
                f"mesh '{mesh.name}' already has its torch.distributed process group "
                "(setup_process_group was called on it before); "
                "destroy_process_group(mesh) first to make a new one"
            )
        raise RuntimeError(
            f"the processes of actor(s) {where} of mesh '{mesh.name}' already have a "
            "torch.distributed process group (another mesh's, in the same processes); "
            "destroy_process_group(that mesh) or stop it first"
        )
    leader = infos[ranks[0]]
    hosts = {info["host"] for info in infos.values()}
    # One host: loopback. Several: where other hosts reach the leader's process.
    address = "127.0.0.1" if len(hosts) == 1 else leader["ip"]
    if backend is None:
        backend = "nccl" if all(info["gpus"] > 0 for info in infos.values()) else "gloo"
    layout = _layout(ranks, {root: info["host"] for root, info in infos.items()})
    await run_in_actors(mesh, _join, layout, address, leader["port"], backend, timeout, key)


def _layout(ranks: tuple[int, ...], hosts: Mapping[int, str]) -> dict[int, tuple[int, int, int]]:
    """Root rank -> (group rank, local rank, local world size); local means same host."""
    per_host: dict[str, list[int]] = {}
    for root in ranks:
        per_host.setdefault(hosts[root], []).append(root)
    layout = {}
    for group_rank, root in enumerate(ranks):
        peers = per_host[hosts[root]]
        layout[root] = (group_rank, peers.index(root), len(peers))
    return layout


def _probe(host: ActorHost, leader: int, key: str, timeout: float) -> dict[str, Any]:
    """In each actor: its host name and GPU count; the leader also starts the store."""
    import torch

    runtime = Runtime.current()
    reachable = tcp_part(runtime.address) if runtime is not None else None
    info: dict[str, Any] = {
        "host": host_id(),  # this boot and network namespace: hostnames may repeat
        "ip": parse_tcp(reachable)[0] if reachable else "127.0.0.1",
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "initialized": torch.distributed.is_initialized(),
        # This very actor joined it: a second setup of the same mesh.
        "own": _destroy_group in host.on_close,
    }
    if context().actor_instance.rank.rank == leader:
        import torch.distributed as dist

        # torch documents TCPStore here but does not re-export it explicitly for mypy.
        store = dist.TCPStore(  # type: ignore[attr-defined]
            "0.0.0.0",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=timeout),
        )
        _STORES[key] = store
        info["port"] = store.port
    return info


def _drop_store(host: ActorHost, key: str) -> None:
    _STORES.pop(key, None)


def _join(
    host: ActorHost,
    layout: Mapping[int, tuple[int, int, int]],
    address: str,
    port: int,
    backend: str,
    timeout: float,
    key: str,
) -> None:
    """In each actor: set torch's variables and join the group (blocks until all have)."""
    import torch
    import torch.distributed as dist

    rank, local_rank, local_world = layout[context().actor_instance.rank.rank]
    if dist.is_initialized():
        _STORES.pop(key, None)
        raise RuntimeError(
            "this process already has a torch.distributed process group; an actor mesh "
            "whose processes host another group's actors cannot have one too "
            "(destroy_process_group(other_mesh) first)"
        )
    world = len(layout)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(local_world),
        MASTER_ADDR=address,
        MASTER_PORT=str(port),
    )
    if address != "127.0.0.1" and "GLOO_SOCKET_IFNAME" not in os.environ:
        # Gloo finds its interface through the host name, which other hosts may not
        # reach (or which names another host's address): name the one that reaches them.
        interface = interface_of(route_source(format_tcp(address, port)))
        if interface is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    wait = datetime.timedelta(seconds=timeout)
    store = _STORES.pop(key, None)
    if store is None:
        store = dist.TCPStore(address, port, is_master=False, timeout=wait)  # type: ignore[attr-defined]
    if backend == "nccl":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=wait)
    host.on_close.append(_destroy_group)


def _destroy_in_actor(host: ActorHost) -> None:
    if _destroy_group in host.on_close:
        host.on_close.remove(_destroy_group)
    _destroy_group()


def _destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        os.environ.pop(name, None)
