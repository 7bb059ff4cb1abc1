"""The small interface every compared system implements.

A `System` is one runtime under test inside one benchmark worker process. It opens
`Mesh` objects: groups of *echo actors* (every system defines the same actor with
the endpoints listed in `ECHO_ENDPOINTS`) addressed by flat rank. The generic
workloads in ``bench.workloads`` are written against this interface only; a system
adds or replaces workloads through `System.overrides` and declares the ones it
cannot run in `System.unsupported`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from bench.workloads import Context

__all__ = [
    "ECHO_ENDPOINTS",
    "Mesh",
    "Metrics",
    "NotApplicable",
    "NotAvailable",
    "System",
    "WorkloadFn",
]

Metrics = dict[str, Any]
WorkloadFn = Callable[["Context"], Metrics | Awaitable[Metrics]]

# What every system's echo actor answers, by endpoint name:
#   ping(x) -> x                      no-op
#   pid() -> int                      its process id
#   fingerprint(t) -> (numel, crc)    bench.payload.fingerprint of a tensor argument
#   checksum(t) -> (numel, crc)       bench.payload.checksum of a tensor argument
#   hold(nbytes) -> None              make and keep a tensor of nbytes
#   give() -> tensor                  return the tensor kept by hold()
#   a2a(peer, n) -> list[float]       call peer.ping n times, return each duration in s
ECHO_ENDPOINTS = ("a2a", "checksum", "fingerprint", "give", "hold", "pid", "ping")


class NotAvailable(Exception):
    """The system cannot run this workload (yet); the message says why."""


class NotApplicable(Exception):
    """The workload is not meant for this system (``choose`` policies on the floor)."""


class Mesh(ABC):
    """A live group of echo actors of one system, addressed by flat rank ``0..size-1``."""

    def __init__(self, size: int) -> None:
        self.size = size

    @abstractmethod
    def send(self, rank: int, method: str, *args: Any) -> Any:
        """Issue a call of ``method`` on actor ``rank`` now; return the system's future."""

    @abstractmethod
    async def wait(self, pending: Any) -> Any:
        """Await a future returned by `send` from asyncio code."""

    @abstractmethod
    def wait_sync(self, pending: Any) -> Any:
        """Block on a future returned by `send` from sync code (no running event loop)."""

    @abstractmethod
    async def call_all(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` on every actor in the system's broadcast form; values by rank."""

    @abstractmethod
    def ref(self, rank: int) -> Any:
        """A handle to actor ``rank`` that can be passed to another actor (for ``a2a``)."""

    @abstractmethod
    def close_sync(self) -> None:
        """Stop the actors (and their processes where the mesh owns them)."""

    async def call(self, rank: int, method: str, *args: Any) -> Any:
        """``send`` then ``wait``."""
        return await self.wait(self.send(rank, method, *args))

    def call_sync(self, rank: int, method: str, *args: Any) -> Any:
        """``send`` then ``wait_sync``."""
        return self.wait_sync(self.send(rank, method, *args))

    async def wait_many(self, pending: Sequence[Any]) -> list[Any]:
        """Await several futures in order (no extra tasks: the pipelined workload's wait)."""
        return [await self.wait(p) for p in pending]

    async def close(self) -> None:
        """`close_sync` off the event loop thread."""
        await asyncio.to_thread(self.close_sync)


class System(ABC):
    """One runtime under test, set up once per benchmark worker process."""

    multi_actor_procs: ClassVar[bool] = True
    """Whether several actors may share one process (used by ``fanout``)."""
    unsupported: ClassVar[dict[str, str]] = {}
    """Workloads this system does not run, with the reason shown in the results."""

    def start_sync(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Session-wide set-up (``ray.init``, an RPC world); called once, lazily."""

    def stop_sync(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Undo `start_sync`; called once at the end of the worker."""

    @abstractmethod
    def open_sync(self, actors: int, procs: int) -> Mesh:
        """Start ``actors`` echo actors spread over ``procs`` processes, all answering.

        ``actors`` is a multiple of ``procs``; ``procs == actors`` unless
        `multi_actor_procs` is true. Called from sync code with no running event loop.
        """

    async def open(self, actors: int, procs: int) -> Mesh:
        """`open_sync` from asyncio code (on a worker thread unless overridden)."""
        return await asyncio.to_thread(self.open_sync, actors, procs)

    def overrides(self) -> dict[str, WorkloadFn]:
        """Workloads this system measures its own way (the floor's memcpy, RPC worlds)."""
        return {}

    def probe(self) -> None:
        """Body of the ``spawn_4`` subprocess: 4 actors, a reply from each, then stop.

        Prints ``READY`` once every actor answered; the runner times the interpreter
        from start to that line.
        """
        self.start_sync()
        mesh = self.open_sync(4, 4)
        print("READY", flush=True)
        mesh.close_sync()
        self.stop_sync()
