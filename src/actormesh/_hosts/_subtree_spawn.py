"""Starting a host mesh's workers through its tree of agents (``HOST spawn_tree``).

With more hosts than the fan-out, ``spawn_procs`` leaves the controller as one request
per child of it, not one per host: each carries the workers of that agent's own host and
the branches below it (``CastTree.branches``). An agent starts its own workers while it
forwards each branch to the child agent at its head, and answers once for its whole
subtree, host by host (``Answer``): the workers started there, or the error that stopped
them, or why no answer can come (the agent relaying to that host died).

Spawning is all or nothing for the controller (``_launch``): when any host fails, it
stops what started. A host it holds no answer from may still start workers (the request
may be on its way below a dead agent), so the controller tells each such host to drop
the spawn (``HOST drop_spawn``, over the agent's own connection): the agent kills the
workers it started for those keys, now or when they join, and refuses the request if it
comes later. So a failed spawn leaves no worker behind whichever agent died.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from .._core import dumps, error_payload, headers, loads

__all__ = ["Answer", "Branch", "SubtreeSpawn", "branch_addresses"]

# One host's part of the answer: ("ok", [(address, pid), ...]) for the workers started
# there, ("error", payload) with the error that stopped them (``error_payload``), or
# ("lost", reason) when the agent relaying to the host died before it answered.
Answer = tuple[str, Any]
# A branch of the tree below an agent: the child's address, its host's workers, and the
# branches below it (``CastTree.branches``).
Branch = tuple[str, Sequence[Any], Sequence[Any]]


def branch_addresses(branch: Branch) -> Iterator[str]:
    """The address of every agent of ``branch``, its head first."""
    address, _, below = branch
    yield address
    for child in below:
        yield from branch_addresses(child)


class _FromBelow:
    """A child agent's answer for its subtree (a core ``ReplyHandler``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[Any] = loop.create_future()

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if not self.future.done():
            if ok:
                self.future.set_result(loads(parts[0], parts[1:]))
            else:  # the child could not even read the request: its whole subtree failed
                self.future.set_result(bytes(parts[0]))
        return True

    def on_lost(self, conn: Any, reason: str) -> bool:
        return False  # a child's loss comes through ``SubtreeSpawn.lost``, by address

    def lose(self, reason: str) -> None:
        if not self.future.done():
            self.future.set_result(reason)


class SubtreeSpawn:
    """An agent's part in starting workers through the tree (loop thread).

    Args:
        runtime: the agent's runtime (its requests to child agents are registered there).
        send: sends a frame to the agent at an address (``Peers.send``).
        start: starts this host's workers from their specs: their ``(address, pid)``.
    """

    def __init__(
        self,
        runtime: Any,
        send: Callable[[str, list[Any]], None],
        start: Callable[[Sequence[Any]], Awaitable[list[tuple[str, int]]]],
    ) -> None:
        self._runtime = runtime
        self._send = send
        self._start = start
        # The requests forwarded to each child agent, by its address, then request id.
        self._below: dict[str, dict[int, _FromBelow]] = {}

    async def spawn(self, specs: Sequence[Any], below: Sequence[Branch]) -> dict[str, Answer]:
        """Start this host's workers and every branch's at once; the answer of each host
        of the subtree, by its agent's address (this host's under ``""``)."""
        own = asyncio.ensure_future(self._own(specs))
        theirs = await asyncio.gather(*(self._forward(branch) for branch in below))
        answer: dict[str, Answer] = {"": await own}
        for part in theirs:
            answer.update(part)
        return answer

    async def _own(self, specs: Sequence[Any]) -> Answer:
        try:
            return ("ok", await self._start(specs))
        except Exception as error:
            return ("error", error_payload(error, mesh="host", point={}, endpoint="host"))

    async def _forward(self, branch: Branch) -> dict[str, Answer]:
        address, specs, below = branch
        waiting = _FromBelow(self._runtime.loop)
        req_id = self._runtime.register(waiting)
        self._below.setdefault(address, {})[req_id] = waiting
        payload, buffers = dumps((specs, below))
        self._send(
            address, [headers.encode(headers.HostOp(req_id, "spawn_tree")), payload, *buffers]
        )
        try:
            answer = await waiting.future
        finally:
            self._runtime.forget(req_id)
            self._below.get(address, {}).pop(req_id, None)
        if isinstance(answer, dict):
            answer[address] = answer.pop("")
            return dict(answer)
        # The child is gone (a reason), or could not read the request (an error payload).
        failed: Answer = ("lost", answer) if isinstance(answer, str) else ("error", answer)
        return {each: failed for each in branch_addresses(branch)}

    def lost(self, address: str) -> None:
        """The child agent at ``address`` is unreachable: what was forwarded to it gets no
        answer from its subtree."""
        reason = f"the host agent at {address}, which relays to this host, is gone"
        for waiting in self._below.pop(address, {}).values():
            waiting.lose(reason)
