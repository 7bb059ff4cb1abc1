"""Processes on other hosts: how they join an owner, and how the owner sees them go.

A remote worker dials its owner over TCP (authenticated), listens on TCP itself, and says
HELLO with the address other processes reach it at. The owner cannot watch a remote pid,
so the connection stands for the process: when it closes (the process exited, its host
went away, TCP keepalive gave up, or the owner declared it dead after missed heartbeats),
the process is dead, and it is reported exactly like a local worker's exit. The worker
holds up its end of the bargain: it exits when its owner's connection closes.

Who waits for a process to join is up to the allocator that asked for it: ``Joins`` hands
each HELLO from a process this runtime did not start to the waiters in turn; a process
nobody waits for yet waits in a lobby for the next one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._transport import Connection
from ._process import ChildProcess

__all__ = [
    "Joined",
    "Joins",
    "RemoteProcess",
    "Status",
]

log = logging.getLogger("actormesh.remote")

JoinWaiter = Callable[["Joined"], bool]


@dataclass(frozen=True)
class Joined:
    """A process that connected to this one and said HELLO, not yet given a rank.

    Attributes:
        conn: its connection to us (it dialled).
        address: where it accepts connections (``tcp://host:port``).
        pid: its process id on its own host.
        key: its unique name in the job.
        info: what it says about itself: ``host`` (host name), and optionally ``rank``
            (asked for) and ``local_rank`` (its index on its host).
    """

    conn: Connection
    address: str
    pid: int
    key: str
    info: Mapping[str, Any] = field(default_factory=dict)


class Joins:
    """The waiters for joining processes, and a lobby; every method runs on the loop thread.

    A process that joins while no waiter takes it waits in the lobby (a cluster may start
    workers before the controller asks for its mesh); each new waiter is offered the
    lobby first, in joining order. A lobby process whose connection closes is forgotten.
    """

    def __init__(self) -> None:
        self._waiters: list[JoinWaiter] = []
        self._lobby: list[Joined] = []

    def wait(self, waiter: JoinWaiter) -> Callable[[], None]:
        """Offer joining processes to ``waiter`` (it returns True for those it takes),
        those in the lobby first, until the returned function is called."""
        self._waiters.append(waiter)
        waiting, self._lobby = self._lobby, []
        for joined in waiting:
            if joined.conn.closed:
                continue
            if waiter not in self._waiters or not waiter(joined):
                self._lobby.append(joined)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

        return stop

    def offer(self, joined: Joined) -> None:
        """A process joined: the first waiter that takes it has it; else it waits."""
        for waiter in list(self._waiters):
            if waiter(joined):
                return
        self._lobby = [j for j in self._lobby if not j.conn.closed]
        self._lobby.append(joined)
        log.info(
            "process %s (pid %s on %s) joined; it waits for a mesh to ask for it",
            joined.key,
            joined.pid,
            joined.info.get("host", joined.address),
        )

    def waiting(self) -> list[Joined]:
        """The processes in the lobby."""
        self._lobby = [j for j in self._lobby if not j.conn.closed]
        return list(self._lobby)


class Status:
    """Stands in for the ``Popen`` of a process on another host: its exit status is set
    when the owner learns of its end (no waitpid reaches across hosts)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdout = None
        self.stderr = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class RemoteProcess(ChildProcess):
    """A worker on another host (or started by someone else), owned by this process.

    Args:
        joined: the process as it joined.
        rank: its rank in its process mesh.
        kill: called once when the owner kills it (the Ray actor holding it, say); the
            connection is closed in any case, which ends the worker.
    """

    local = False

    def __init__(self, joined: Joined, rank: int, kill: Callable[[], None] | None = None) -> None:
        super().__init__(joined.key, rank, joined.address, Status(joined.pid))  # type: ignore[arg-type]
        self.conn = joined.conn
        self.host = str(joined.info.get("host", ""))
        self._kill = kill
        self._on_exit: Callable[[ChildProcess], None] | None = None

    def kill_with(self, kill: Callable[[], None] | None) -> None:
        """How to end it for sure (the Ray actor that holds it, say), from now on
        (``None``: never by force; a leased host agent ends by its lease)."""
        self._kill = kill

    def watch(self, loop: Any, on_exit: Callable[[ChildProcess], None]) -> None:
        """Call ``on_exit`` on ``loop`` once the process is gone (its connection closed)."""
        self._loop = loop
        self._on_exit = on_exit
        if self.conn.closed:
            self.connection_lost()

    def connection_lost(self) -> None:
        """Its connection closed: the process is dead to us (loop thread)."""
        status: Status = self.popen  # type: ignore[assignment]
        if status.returncode is not None:
            return
        status.returncode = 0 if self.stopping else 1
        if self.death_note is None:
            where = f"on {self.host} " if self.host else ""
            self.death_note = (
                f"{where}closed its connection (it exited, or its host is unreachable)"
            )
        if self._on_exit is not None and self._loop is not None:
            self._loop.call_soon(self._on_exit, self)

    def signal_group(self, sig: int) -> None:
        """Any signal ends it: we close the connection (it exits when it sees that) and,
        for a process someone else holds, have them kill it."""
        self.conn.close()
        kill, self._kill = self._kill, None
        if kill is not None:
            try:
                kill()
            except Exception:
                log.exception("killing remote process %s failed", self.key)
