"""``ProcessOwner``: what the core runtime asks of the layer that owns processes.

The core (layer 2) knows connections, requests and hosted actors, not processes. Four
things it meets need someone who owns processes (layer 3, ``_hosts.Children``): a HELLO
(a worker it started, or a process that joins), a heartbeat's answer, a connection of
one of its workers closing, and shutting its workers down. The runtime holds one such
part (``CoreRuntime.owner``) and asks it; a process that owns none keeps ``NO_PROCESSES``.
"""

from __future__ import annotations

from typing import Any, Protocol

from .._transport import Connection

__all__ = ["NO_PROCESSES", "NoProcesses", "ProcessOwner"]


class ProcessOwner(Protocol):
    """The part of a runtime that owns processes; every method runs on the loop thread,
    except ``stop_all``."""

    def hello(self, conn: Connection, header: tuple[Any, ...]) -> None:
        """A process said HELLO on ``conn`` (the received header)."""
        ...

    def answered(self, peer: str) -> None:
        """The process at ``peer`` answered a heartbeat (PONG)."""
        ...

    def connection_closed(self, conn: Connection, error: BaseException | None) -> bool:
        """``conn`` closed: True when it was one of ours and that is taken care of (the
        core then fails nothing itself)."""
        ...

    def owns_processes(self) -> bool:
        """True while it owns any process (whose secret is then fixed)."""
        ...

    def stop_all(self) -> None:
        """Stop every process it owns (at shutdown, off the loop thread)."""
        ...


class NoProcesses:
    """The owner of a process that owns none: a HELLO is refused, the rest is nothing."""

    def hello(self, conn: Connection, header: tuple[Any, ...]) -> None:
        raise ValueError("a HELLO reached a process that owns no workers")

    def answered(self, peer: str) -> None:
        pass

    def connection_closed(self, conn: Connection, error: BaseException | None) -> bool:
        return False

    def owns_processes(self) -> bool:
        return False

    def stop_all(self) -> None:
        pass


NO_PROCESSES = NoProcesses()
