"""``RayAllocator``: the processes of a mesh placed on a Ray cluster.

Ray is the cluster engine here (nodes, resources, placement); actormesh's own transport
runs between the processes once they are up. For a mesh of N processes the allocator
reserves a placement group of N bundles (``PACK`` or ``SPREAD`` them over nodes), starts
one small Ray actor in each bundle, and that actor starts the actormesh worker, which
dials the controller over TCP with the job's secret. GPUs are Ray's to assign: a worker
sees its bundle's GPUs in ``CUDA_VISIBLE_DEVICES``.

Stopping the mesh stops the workers, kills the Ray actors and removes the placement
group. A worker never outlives its Ray actor, nor the controller's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._api import ProcessSpec
from .._hosts import AgentLink, ChildProcess, Joined, JoinWait, Runtime
from .._shape import Point
from .._transport import format_tcp, parse_tcp
from ._ray_host import ProcessHost

__all__ = ["RayAllocator"]

log = logging.getLogger("actormesh.allocators")

Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_HOST_CLASSES: dict[int, Any] = {}
_AGENT_MODULE = "actormesh._hosts._agent_main"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("RayAllocator needs Ray: pip install ray") from None
    return ray


def _host_class(ray: Any) -> Any:
    # Wrapped on first use, so importing actormesh.allocators never imports Ray.
    cls = _HOST_CLASSES.get(id(ray))
    if cls is None:
        cls = _HOST_CLASSES[id(ray)] = ray.remote(max_restarts=0)(ProcessHost)
    return cls


@dataclass
class _Placement:
    """What one allocation holds on the cluster."""

    ray: Any
    group: Any
    actors: list[Any]
    where: list[dict[str, Any]]

    def killer(self, index: int) -> Callable[[], None]:
        actor = self.actors[index]

        def kill() -> None:
            with contextlib.suppress(Exception):  # already dead, or Ray shut down
                self.ray.kill(actor, no_restart=True)

        return kill

    def release(self) -> None:
        for index in range(len(self.actors)):
            self.killer(index)()
        with contextlib.suppress(Exception):
            from ray.util import remove_placement_group

            remove_placement_group(self.group)


class RayAllocator:
    """Places each process of a mesh in its own bundle of a Ray placement group.

    Args:
        strategy: how bundles spread over nodes: ``"PACK"`` (few nodes), ``"SPREAD"``
            (many nodes), or their ``STRICT_`` forms. Host agents (``host_mesh``) are
            spread one per node (``"STRICT_SPREAD"``) unless ``host_strategy`` says else.
        cpus_per_process: CPUs each bundle reserves.
        gpus_per_process: GPUs each bundle reserves (Ray sets ``CUDA_VISIBLE_DEVICES``).
        resources: further custom resources per bundle.
        listen_host: where the controller accepts the workers. ``None``:
            ``Config.listen_host`` if set, else loopback when every Ray node is this host,
            else this node's IP address as Ray knows it.
        timeout: seconds for placement and joining (``None``: ``Config.spawn_timeout``).
        init: keyword arguments for ``ray.init()`` when Ray is not initialized yet (it
            then connects to ``RAY_ADDRESS`` or starts a local cluster).
        host_strategy: the placement strategy of host agents.

    For ``proc_mesh`` each bundle (``cpus_per_process``, ``gpus_per_process``,
    ``resources``) holds one process; for ``host_mesh`` it holds one host agent and the
    processes it will start there.

    Example::

        procs = await proc_mesh(hosts=2, gpus=4, allocator=RayAllocator(gpus_per_process=1))
    """

    def __init__(
        self,
        *,
        strategy: Strategy = "PACK",
        cpus_per_process: float = 1.0,
        gpus_per_process: float = 0.0,
        resources: Mapping[str, float] | None = None,
        listen_host: str | None = None,
        timeout: float | None = None,
        init: Mapping[str, Any] | None = None,
        host_strategy: Strategy = "STRICT_SPREAD",
    ) -> None:
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(_STRATEGIES)}, not {strategy!r}")
        amounts = {"CPU": cpus_per_process, "GPU": gpus_per_process, **(resources or {})}
        if any(value < 0 for value in amounts.values()):
            raise ValueError(f"resources per process cannot be negative: {amounts}")
        self.bundle = {name: float(value) for name, value in amounts.items() if value}
        if not self.bundle:
            raise ValueError("each process must reserve some resource (CPU, GPU or custom)")
        self.strategy = strategy
        self.host_strategy = host_strategy
        self._cpus = cpus_per_process
        self._gpus = gpus_per_process
        self._resources = dict(resources or {})
        self._listen_host = listen_host
        self._timeout = timeout
        self._init = dict(init or {})
        self._placements: dict[str, _Placement] = {}  # first process' key -> its placement

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        """Reserve the bundles, start a worker in each, and wait until all joined."""
        joined, placement = await self._allocate(runtime, specs, "actormesh._bootstrap", False)
        children: list[ChildProcess] = [
            runtime.adopt(on_node, spec.rank, kill=placement.killer(index))
            for index, (spec, on_node) in enumerate(zip(specs, joined))
        ]
        if children:
            self._placements[children[0].key] = placement
        return children

    async def start_hosts(self, runtime: Runtime, count: int) -> list[AgentLink]:
        """Place ``count`` host agents, one per Ray node (the placement group's strategy:
        ``STRICT_SPREAD`` unless told otherwise), each reserving one bundle; own them.

        Each agent holds its bundle's resources (its GPUs in ``CUDA_VISIBLE_DEVICES``) for
        the processes ``spawn_procs`` asks it for. Shutting the host mesh down ends the
        agents, and their Ray actors and placement group go with them.
        """
        specs = [
            ProcessSpec(f"agent-{uuid.uuid4().hex[:8]}-{i}", i, Point((), (), ()))
            for i in range(count)
        ]
        joined, placement = await self._allocate(runtime, specs, _AGENT_MODULE, True)
        links = []
        for index, on_node in enumerate(joined):
            link = runtime.adopt_agent(on_node)
            link.process.kill_with(placement.killer(index))
            links.append(link)
        if links:
            self._placements[links[0].process.key] = placement
        return links

    async def _allocate(
        self, runtime: Runtime, specs: Sequence[ProcessSpec], module: str, hosts: bool
    ) -> tuple[list[Joined], _Placement]:
        """Place one Ray actor per spec, start ``module`` in each, and wait until every
        process joined: the processes in spec order, each naming its Ray node as host."""
        ray = _import_ray()
        timeout = runtime.config.spawn_timeout if self._timeout is None else self._timeout
        host, reachable = await asyncio.to_thread(self._controller_host, ray, runtime)
        address = runtime.listen_tcp(host)
        if host in ("0.0.0.0", "::"):  # listening everywhere: they dial this node's IP
            address = format_tcp(reachable, parse_tcp(address)[1])
        keys = {spec.key for spec in specs}
        waiting = JoinWait(runtime, len(specs), accept=lambda joined: joined.key in keys)
        placement: _Placement | None = None
        try:
            placement = await asyncio.to_thread(
                self._place, ray, specs, address, runtime, timeout, module, hosts
            )
            arrived = await waiting.wait(timeout, f"at {address} from Ray")
        except BaseException:
            waiting.close()
            if placement is not None:
                await asyncio.to_thread(placement.release)
            raise
        by_key = {j.key: j for j in arrived}
        joined = []
        for spec, where in zip(specs, placement.where):
            # Messages about the process name its node ("... on Ray node 10.0.0.5 (a3f0)").
            node = f"Ray node {where.get('node', '?')} ({str(where.get('node_id', '?'))[:8]})"
            info = {**by_key[spec.key].info, "host": node}
            joined.append(dataclasses.replace(by_key[spec.key], info=info))
        return joined, placement

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        """End the host agents (and their processes), their Ray actors and placement."""
        await self.stop(runtime, [link.process for link in links], grace)

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        """Stop the workers, kill their Ray actors and remove the placement group."""
        await runtime.stop_processes(processes, grace)
        placement = self._placements.pop(processes[0].key, None) if processes else None
        if placement is not None:
            await asyncio.to_thread(placement.release)

    def _controller_host(self, ray: Any, runtime: Runtime) -> tuple[str, str]:
        # Where to listen, and this node's address as the cluster knows it.
        if not ray.is_initialized():
            ray.init(**self._init)
        here = str(ray.util.get_node_ip_address())
        if self._listen_host or runtime.config.listen_host:
            return str(self._listen_host or runtime.config.listen_host), here
        nodes = {node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")}
        return ("127.0.0.1" if nodes <= {here} else here), here

    def _place(
        self,
        ray: Any,
        specs: Sequence[ProcessSpec],
        address: str,
        runtime: Runtime,
        timeout: float,
        module: str = "actormesh._bootstrap",
        hosts: bool = False,
    ) -> _Placement:
        from ray.util import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = self.host_strategy if hosts else self.strategy
        group = placement_group([dict(self.bundle) for _ in specs], strategy=strategy)
        placement = _Placement(ray, group, [], [])
        try:
            ready, _ = ray.wait([group.ready()], timeout=timeout)
            if not ready:
                raise TimeoutError(
                    f"Ray could not place {len(specs)} bundles of {self.bundle} "
                    f"({strategy}) within {timeout:g} s; free resources: "
                    f"{ray.available_resources()}"
                )
            host_class = _host_class(ray)
            for index in range(len(specs)):
                placement.actors.append(
                    host_class.options(
                        num_cpus=self._cpus,
                        num_gpus=self._gpus,
                        resources=self._resources or None,
                        scheduling_strategy=PlacementGroupSchedulingStrategy(group, index),
                    ).remote()
                )
            started = [
                actor.start.remote(self._environment(spec, address, runtime), module)
                for actor, spec in zip(placement.actors, specs)
            ]
            placement.where = ray.get(started, timeout=timeout)
        except BaseException:
            placement.release()
            raise
        log.debug("placed %d workers with Ray: %s", len(specs), placement.where)
        return placement

    @staticmethod
    def _environment(spec: ProcessSpec, address: str, runtime: Runtime) -> dict[str, str]:
        return {
            **spec.env,
            "ACTORMESH_KEY": spec.key,
            "ACTORMESH_PARENT": address,
            "ACTORMESH_SECRET": runtime.secret,
            "ACTORMESH_OUTPUT": runtime.config.output,
        }

    def __repr__(self) -> str:
        return f"RayAllocator(strategy={self.strategy!r}, bundle={self.bundle})"
