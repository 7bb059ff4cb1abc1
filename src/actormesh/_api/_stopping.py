"""Stopping the actors of a mesh in its processes (``STOP_MESH``), as one cast.

Each process drops the mesh's actors (running their ``__cleanup__``) and confirms. The
frames leave as a cast (``send_frames``): one frame per host agent, or per child of this
process in a tree of agents, whose confirmations come back gathered, not one per process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core import headers
from .._exceptions import ActorDiedError
from .._hosts import Runtime
from .._transport import Connection
from ._future import Future

__all__ = ["stop_mesh_in"]


class _StopRequest:
    """Waits for every process to confirm a STOP_MESH (or to be gone)."""

    def __init__(self, future: Future[None], expected: int) -> None:
        self.future = future
        self.expected = expected
        self.conns: list[Connection] = []
        if expected == 0:
            future._set_result(None)

    def count(self) -> bool:
        self.expected -= 1
        if self.expected <= 0:
            self.future._set_result(None)
            return True
        return False

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        return self.count()

    def on_lost(self, conn: Connection, reason: str) -> bool:
        return self.count() if conn in self.conns else False


def stop_mesh_in(
    runtime: Runtime, mesh_id: str, processes: Sequence[tuple[str, int]]
) -> Future[None]:
    """Have the processes at ``processes`` (``(address, rank)``) drop the actors of
    ``mesh_id``; resolves once each has confirmed or is gone (any thread)."""
    future: Future[None] = Future._new(runtime.in_loop_thread)
    request = _StopRequest(future, len(processes))
    req_id = runtime.register(request)
    header = headers.StopMesh(req_id, mesh_id)
    shared: list[Any] = []  # (one list for every frame: they go as one cast)
    frames = []
    for path, rank in processes:
        try:
            conn = runtime.connection(path)
        except ActorDiedError:
            runtime.call_soon(request.count)
            continue
        request.conns.append(conn)
        # One confirmation per process, whatever ranks of the mesh it hosts.
        frames.append((conn, (rank,), header, shared))
    for _ in runtime.send_frames(frames, req_id):
        runtime.call_soon(request.count)
    return future
