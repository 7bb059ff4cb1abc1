"""A host allocator written by a user with nothing but ``actormesh.allocators``' kit: it
starts each "host" as an ``actormesh host --join`` process (what ssh or a cluster
launcher would run on a real host), waits for the agents to dial in, and owns them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import pytest

from actormesh import Actor, endpoint, host_mesh
from actormesh.allocators import (
    AgentLink,
    ChildProcess,
    HostAllocator,
    JoinWait,
    LocalAllocator,
    ProcessSpec,
    Runtime,
    is_agent,
)

pytestmark = pytest.mark.timeout(120)


class LauncherHosts:
    """Each host an ``actormesh host --join`` child process; processes for ``proc_mesh``
    from the default allocator."""

    def __init__(self) -> None:
        self.launched: list[subprocess.Popen[bytes]] = []
        self.local = LocalAllocator()

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        return await self.local.start(runtime, specs)

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        await self.local.stop(runtime, processes, grace)

    async def start_hosts(self, runtime: Runtime, count: int) -> list[AgentLink]:
        address = runtime.listen_tcp("127.0.0.1", 0).removeprefix("tcp://")
        waiting = JoinWait(runtime, count, accept=is_agent)
        env = {**os.environ, "ACTORMESH_SECRET": str(runtime.secret)}
        for _ in range(count):
            command = [sys.executable, "-m", "actormesh._cli", "host", "--join", address]
            self.launched.append(subprocess.Popen(command, env=env))
        joined = await waiting.wait(60.0, f"as host agents at {address}")
        return [runtime.adopt_agent(j) for j in joined]

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        await runtime.stop_processes([link.process for link in links], grace)


class Where(Actor):
    @endpoint
    def where(self) -> int:
        return os.getppid()


def test_a_host_allocator_from_the_public_kit_runs_a_host_mesh() -> None:
    allocator = LauncherHosts()
    assert isinstance(allocator, HostAllocator)
    hosts = host_mesh(2, allocator=allocator).get(timeout=90)
    try:
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        parents = procs.spawn("where", Where).where.call().get(timeout=60).values()
        launched = {p.pid for p in allocator.launched}
        # Each host's workers are the children of the agent launched for it.
        assert len(parents) == 4 and set(parents) == launched
    finally:
        hosts.shutdown().get(timeout=60)
    for process in allocator.launched:
        assert process.wait(timeout=30) == 0  # the agents left when their hosts stopped


class ProcessesOnly:
    """An ``Allocator`` for ``proc_mesh`` only: no ``start_hosts``/``stop_hosts``."""

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        return await LocalAllocator().start(runtime, specs)

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        await LocalAllocator().stop(runtime, processes, grace)


def test_host_mesh_refuses_an_allocator_that_cannot_start_hosts() -> None:
    with pytest.raises(TypeError, match=r"cannot start host agents: it is not a HostAllocator"):
        host_mesh(2, allocator=ProcessesOnly())
