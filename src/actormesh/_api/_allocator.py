"""Allocators: where the processes of a process mesh come from.

``proc_mesh(..., allocator=...)`` asks its allocator for one process per rank; the
allocator starts them (or waits for them) and hands them over joined to this process'
runtime. The default, `LocalAllocator`, starts subprocesses on this host that talk over
Unix sockets. Others (``actormesh.allocators``) place processes on a Ray cluster or accept
processes started by a cluster scheduler; those talk over authenticated TCP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .._hosts import AgentLink, ChildProcess, LaunchCommand, Runtime
from .._shape import Point

__all__ = ["Allocator", "HostAllocator", "LocalAllocator", "ProcessSpec"]


@dataclass(frozen=True)
class ProcessSpec:
    """One process a process mesh needs.

    Attributes:
        key: its unique name in the job (workers introduce themselves by it).
        rank: its flat rank in the process mesh.
        point: its coordinates in the process mesh.
        env: environment variables it must see (``ACTORMESH_RANK`` and friends, and the
            ones given to ``proc_mesh(env=...)``).
        command: how to start it, if not as usual (``spawn_procs(bootstrap_command=...)``:
            a program, its arguments, its environment). Allocators that start no
            processes of their own (they wait for processes that join) ignore it.
    """

    key: str
    rank: int
    point: Point
    env: Mapping[str, str] = field(default_factory=dict)
    command: LaunchCommand | None = None


@runtime_checkable
class Allocator(Protocol):
    """Gives a process mesh its processes, and takes them back.

    Both methods are coroutines run on the runtime's event loop; they must not block it
    (run blocking calls in a thread: replies from joining workers arrive on that loop).
    """

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        """Start one process per spec and return them, in order, joined to ``runtime``.

        On failure nothing may be left running: stop what did start, then raise.
        """
        ...

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        """Stop ``processes`` (given ``grace`` seconds to exit) and release what they held."""
        ...


@runtime_checkable
class HostAllocator(Allocator, Protocol):
    """An allocator that can also give a host mesh its hosts (``host_mesh(n,
    allocator=...)``): a host agent on each, owned by this process' runtime.

    A host allocator starts ``actormesh host --join ADDRESS`` on each host, with the
    address of ``runtime.listen_tcp()`` and the job's secret (``runtime.secret``, passed
    as ``ACTORMESH_SECRET`` or ``--secret-file``); waits for the agents with
    ``JoinWait(runtime, count, accept=is_agent)``; and owns each with
    ``runtime.adopt_agent(joined)``. Both methods run on the runtime's event loop.
    """

    async def start_hosts(self, runtime: Runtime, count: int) -> list[AgentLink]:
        """Start ``count`` host agents and return their links, joined to ``runtime``."""
        ...

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        """Stop the agents of ``links`` (they end every process they started)."""
        ...


class LocalAllocator:
    """Subprocesses of this process, on this host, over Unix sockets (the default).

    They die with this process (and their actors' children with them), restart in place
    when the mesh asks for it, and share large buffers through shared memory.
    """

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        """Launch ``python -m actormesh._bootstrap`` per spec and wait until all joined."""
        return await runtime.start_processes(
            [(s.key, s.rank, dict(s.env)) for s in specs], [s.command for s in specs]
        )

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        """SHUTDOWN, then SIGTERM after ``grace`` seconds, then SIGKILL."""
        await runtime.stop_processes(processes, grace)

    async def start_hosts(self, runtime: Runtime, count: int) -> list[AgentLink]:
        """``count`` host agents on this host (``host_mesh(n)``): each a "host" of its
        own, starting and watching its workers and relaying casts to them, as agents on
        other hosts do. They die with this process."""
        return await runtime.start_agents(count)

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        """Let the agents go: they exit, and end every process they started."""
        await runtime.stop_processes([link.process for link in links], grace)

    def __repr__(self) -> str:
        return "LocalAllocator()"
