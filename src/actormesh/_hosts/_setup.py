"""Setting up fresh processes before any actor is built in them.

A process started by someone else (a cluster launcher, a host agent on another host) may
need what a locally started worker inherits, its mesh coordinates in its environment,
and a process mesh may ask for a ``bootstrap`` function to run in each of its processes
first (Monarch's ``spawn_procs(bootstrap=...)``). ``ProcessSetup`` does both, sent in a
SPAWN frame like an actor mesh's spawn spec (so a worker needs nothing new): building
rank ``r``'s "actor" updates ``os.environ`` with ``env[r]``, then calls ``bootstrap()``.
``prepare`` sends it and stops that mesh right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._core import EndpointKind, dumps, error_from_payload, headers
from .._exceptions import ActorDiedError
from .._transport import Connection, TransportClosed
from ._runtime import Runtime

__all__ = ["ProcessSetup", "prepare"]


class Reachable(Protocol):
    """A process ``prepare`` can reach: a ``ChildProcess``, or a reference to one."""

    @property
    def listen_path(self) -> str: ...

    @property
    def rank(self) -> int: ...


class _Placeholder:
    # The "actor" a setup leaves behind until its mesh is stopped.

    def __init__(self) -> None:
        self.context = contextvars.copy_context()

    def kind(self, endpoint: str) -> EndpointKind:
        raise AttributeError(f"no endpoint {endpoint!r} here")

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise AttributeError(f"no endpoint {endpoint!r} here")

    def close(self, error: BaseException | None = None, on_loop: Any = None) -> None:
        pass


@dataclass(frozen=True)
class ProcessSetup:
    """What a process gets before its first actor (see the module docstring).

    Attributes:
        env: variables to set, by rank.
        bootstrap: called once in each process after that (a coroutine function is run
            to completion); an exception fails the setup with the remote traceback.
    """

    env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    bootstrap: Callable[[], Any] | None = None

    def actor(self, rank: int) -> tuple[Callable[[], _Placeholder], str, dict[str, int]]:
        """``(factory, name, coordinates)`` as a spawn spec gives them."""
        values = dict(self.env.get(rank, {}))
        bootstrap = self.bootstrap

        def factory() -> _Placeholder:
            os.environ.update(values)
            if bootstrap is not None:
                result = bootstrap()
                if inspect.isawaitable(result):
                    asyncio.run(_awaited(result))  # on the actor's own thread: no loop here
            return _Placeholder()

        return factory, "setup", {}


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class _Replies:
    """Waits for one reply per rank to a SPAWN; a lost connection fails it."""

    def __init__(self, conns: Mapping[Connection, int]) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._conns = conns
        self._left = set(conns.values())

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if not ok and not self.future.done():
            self.future.set_exception(error_from_payload(parts[0]))
        self._left.discard(rank)
        if not self._left and not self.future.done():
            self.future.set_result(None)
        return not self._left

    def on_lost(self, conn: Connection, reason: str) -> bool:
        rank = self._conns.get(conn)
        if rank is None or rank not in self._left:
            return False
        if not self.future.done():
            self.future.set_exception(ActorDiedError(reason, reason=reason))
        return True


async def prepare(
    runtime: Runtime, children: Sequence[Reachable], setup: ProcessSetup, timeout: float
) -> None:
    """Run ``setup`` in each of ``children`` (loop thread); raises what a process raised.

    Raises:
        ActorInitError: the bootstrap raised in some process (its traceback included).
        ActorDiedError: a process died meanwhile.
        TimeoutError: not done within ``timeout`` seconds.
    """
    payload, buffers = dumps(setup)
    mesh_id = f"setup-{uuid.uuid4().hex[:12]}"
    conns = {runtime.connection(c.listen_path): c.rank for c in children}
    replies = _Replies(conns)
    req_id = runtime.register(replies)
    try:
        for conn, rank in conns.items():
            runtime.send(conn, headers.Spawn(req_id, mesh_id, (rank,)), [payload, *buffers])
        await asyncio.wait_for(replies.future, timeout)
    finally:
        runtime.forget(req_id)
        for conn in conns:
            with contextlib.suppress(TransportClosed):
                conn.send([headers.encode(headers.StopMesh(0, mesh_id))])
