"""An agent's requests down its subtree: starting and stopping a host mesh's workers
through its tree of agents (``HOST spawn_tree``, ``HOST stop_tree``).

With more hosts than the fan-out, ``spawn_procs`` and the stop of a process mesh leave
the controller as one request per child of it, not one per host (let alone one frame per
process): each carries what its agent does on its own host and the branches below it
(``CastTree.branches``). An agent does its own part while it forwards each branch to the
child agent at its head, and answers once for its whole subtree, host by host
(``Answer``): what was done there, or the error that stopped it, or why no answer can
come (the agent relaying to that host died).

Spawning is all or nothing for the controller (``_launch``): when any host fails, it
stops what started. A host it holds no answer from may still start workers (the request
may be on its way below a dead agent), so the controller tells each such host to drop
the spawn (``HOST drop_spawn``, over the agent's own connection): the agent kills the
workers it started for those keys, now or when they join, and refuses the request if it
comes later. So a failed spawn leaves no worker behind whichever agent died. A host
whose stop got no answer is stopped process by process, as without a tree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from .._core import dumps, error_payload, headers, loads

__all__ = ["Answer", "Branch", "Subtree", "branch_addresses"]

# One host's part of the answer: ("ok", what its agent's own part returned), ("error",
# payload) with the error that stopped it (``error_payload``), or ("lost", address) when
# the agent at that address, the host's own or one relaying to it, died before it
# answered (the controller turns the address into the host's name).
Answer = tuple[str, Any]
# A branch of the tree below an agent: the child's address, what its own host is to do
# (the workers to start or stop), and the branches below it (``CastTree.branches``).
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
        return False  # a child's loss comes through ``Subtree.lost``, by address

    def lose(self, address: str) -> None:
        if not self.future.done():
            self.future.set_result(address)


class Subtree:
    """An agent's requests down the tree below it (loop thread).

    Args:
        runtime: the agent's runtime (its requests to child agents are registered there).
        send: sends a frame to the agent at an address (``Peers.send``).
    """

    def __init__(self, runtime: Any, send: Callable[[str, list[Any]], None]) -> None:
        self._runtime = runtime
        self._send = send
        # The requests forwarded to each child agent, by its address, then request id.
        self._below: dict[str, dict[int, _FromBelow]] = {}

    def run(
        self,
        op: str,
        own: Callable[[Sequence[Any]], Awaitable[Any]],
        items: Sequence[Any],
        below: Sequence[Branch],
        *extra: Any,
    ) -> Awaitable[dict[str, Answer]]:
        """Do this host's part (``own(items)``) while each branch of ``below`` goes on to
        the agent at its head as the same ``op`` (with ``extra``); the answer of each host
        of the subtree, by its agent's address (this host's under ``""``). The branches
        leave before this returns: what the caller sends a child agent after the request
        reaches it after the request (``adopt_tree``, then frames for the adopted)."""
        mine = asyncio.ensure_future(self._own(own, items))
        theirs = [self._forward(op, branch, extra) for branch in below]
        return self._collect(mine, theirs)

    async def _collect(
        self, mine: Awaitable[Answer], theirs: list[Awaitable[dict[str, Answer]]]
    ) -> dict[str, Answer]:
        parts = await asyncio.gather(*theirs)
        answer: dict[str, Answer] = {"": await mine}
        for part in parts:
            answer.update(part)
        return answer

    async def _own(self, own: Callable[[Sequence[Any]], Awaitable[Any]], items: Any) -> Answer:
        try:
            return ("ok", await own(items))
        except Exception as error:
            return ("error", error_payload(error, mesh="host", point={}, endpoint="host"))

    def _forward(
        self, op: str, branch: Branch, extra: tuple[Any, ...]
    ) -> Awaitable[dict[str, Answer]]:
        address, items, below = branch
        waiting = _FromBelow(self._runtime.loop)
        req_id = self._runtime.register(waiting)
        self._below.setdefault(address, {})[req_id] = waiting
        payload, buffers = dumps((items, below, *extra))
        self._send(address, [headers.encode(headers.HostOp(req_id, op)), payload, *buffers])
        return self._answer_of(branch, req_id, waiting)

    async def _answer_of(
        self, branch: Branch, req_id: int, waiting: _FromBelow
    ) -> dict[str, Answer]:
        address = branch[0]
        try:
            answer = await waiting.future
        finally:
            self._runtime.forget(req_id)
            self._below.get(address, {}).pop(req_id, None)
        if isinstance(answer, dict):
            answer[address] = answer.pop("")
            return dict(answer)
        # The child is gone (its address), or could not read the request (an error).
        failed: Answer = ("lost", answer) if isinstance(answer, str) else ("error", answer)
        return {each: failed for each in branch_addresses(branch)}

    def lost(self, address: str) -> None:
        """The child agent at ``address`` is unreachable: what was forwarded to it gets no
        answer from its subtree."""
        for waiting in self._below.pop(address, {}).values():
            waiting.lose(address)
