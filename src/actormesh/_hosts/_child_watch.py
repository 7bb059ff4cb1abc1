"""An interior agent's heartbeats to its child agents, in a tree of agents.

In a tree (``_tree``) the controller probes only the agents it casts to directly; each
interior agent probes its own children, over the connections it relays to them on
(``_peers``), with the controller's interval and timeout. A child silent for longer than
the timeout is reported to the controller (``EVENT agent_silent``), which declares it
dead as if its own heartbeats had found it. A child that dies outright needs no report:
its own connection to the controller closes. So the controller's heartbeat work grows
with the fan-out, not with the hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from .._core import headers

__all__ = ["ChildWatch"]


class ChildWatch:
    """Heartbeats to the agents at some addresses (loop thread).

    Args:
        loop: the agent's loop.
        send: how a frame reaches an agent by address (``Peers.send``).
        silent: called with an address and a note when that agent stopped answering.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        send: Callable[[str, list[Any]], None],
        silent: Callable[[str, str], None],
    ) -> None:
        self._loop = loop
        self._send = send
        self._silent = silent
        self._heard: dict[str, float] = {}  # address -> when it last answered
        self._task: asyncio.Task[None] | None = None
        self.interval = 1.0
        self.timeout = 30.0

    def watch(self, addresses: list[str], interval: float, timeout: float) -> None:
        """Probe exactly ``addresses`` from now on (those already probed keep their
        last answer)."""
        now = self._loop.time()
        self._heard = {address: self._heard.get(address, now) for address in addresses}
        self.interval, self.timeout = interval, timeout
        if self._heard and (self._task is None or self._task.done()):
            self._task = self._loop.create_task(self._run())

    def answered(self, address: str) -> None:
        """A PONG came from the agent at ``address``."""
        if address in self._heard:
            self._heard[address] = self._loop.time()

    async def _run(self) -> None:
        seq = 0
        last = self._loop.time()
        while self._heard:
            now = self._loop.time()
            stalled = now - last - self.interval
            last = now
            seq += 1
            for address, heard in list(self._heard.items()):
                if stalled > self.interval:  # our own loop could not run: nobody's fault
                    heard = self._heard[address] = heard + stalled
                if now - heard > self.timeout:
                    del self._heard[address]
                    self._silent(
                        address,
                        f"stopped answering its parent agent's heartbeats for {now - heard:.1f}"
                        f" s (limit {self.timeout:g} s, Config.heartbeat_timeout)",
                    )
                    continue
                with contextlib.suppress(Exception):
                    self._send(address, [headers.encode(headers.Ping(seq))])
            await asyncio.sleep(self.interval)
