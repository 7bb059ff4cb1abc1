"""Calls that reach a process before the spawn of their mesh does.

A mesh handle can travel faster than its spawn: an actor spawns a mesh and returns it, and
the caller's first call, sent on another connection, may reach the new actors' process
before the spawn frame from the actor does. Messages from one sender keep their order, but
these come from two. Such a call is held until the spawn comes (then it runs, after the
calls held before it) or until ``wait`` seconds pass (then it is answered as a call to an
actor that is not here). Calls to a mesh this process stopped are answered at once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._transport import Link

__all__ = ["EarlyCalls"]

# How many stopped meshes are remembered (their calls are answered at once).
_ENDED_MAX = 4096

Call = tuple[Link, tuple[Any, ...], list[memoryview]]


class EarlyCalls:
    """The calls held here for meshes whose spawn has not come (loop thread only).

    Args:
        loop: the process' event loop.
        wait: seconds a call waits for its mesh's spawn.
        replay: handles a held call again (the runtime's CALL handler).
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, wait: float, replay: Callable[..., None]
    ) -> None:
        self._loop = loop
        self._wait = wait
        self._replay = replay
        self._held: dict[str, list[Call]] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()

    def hold(self, mesh_id: str, call: Call) -> bool:
        """Hold ``call`` until its mesh's spawn comes; False when that will not happen
        (answer it now)."""
        if mesh_id in self._ended:
            return False
        held = self._held.get(mesh_id)
        if held is None:
            held = self._held[mesh_id] = []
            self._loop.call_later(self._wait, self._expire, mesh_id)
        held.append(call)
        return True

    def arrived(self, mesh_id: str) -> None:
        """The spawn of ``mesh_id`` came: its held calls run, in the order they came."""
        for call in self._held.pop(mesh_id, ()):
            self._replay(*call)

    def ended(self, mesh_id: str) -> None:
        """``mesh_id`` will not come (it was stopped here): calls to it are answered now."""
        self._ended[mesh_id] = None
        while len(self._ended) > _ENDED_MAX:
            self._ended.popitem(last=False)
        self.arrived(mesh_id)  # held ones are answered as calls to actors not here

    def _expire(self, mesh_id: str) -> None:
        if mesh_id in self._held:
            self.ended(mesh_id)
