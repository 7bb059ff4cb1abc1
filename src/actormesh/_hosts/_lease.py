"""A host agent's lease: its host's part of a job goes on while no controller is there.

Without a lease, a host agent ends when its owner (the controller) goes, and its workers
with it: no orphans. A job started with ``keep_alive`` gives each of its agents a lease
(``HOST lease``): from then on the owner's connection closing (an exit, a crash, a
SIGKILL) *detaches* the agent instead of ending it. While detached:

- the workers and their actors keep running, with their state; actors keep calling
  each other (they never go through the controller);
- replies to the calls the controller had in flight are dropped (nobody waits for them);
- failures (a worker's exit, a ``FAILURE`` of a dropped actor) are kept, in order, and
  output is kept up to ``OUTPUT_LIMIT`` bytes (the oldest dropped first, and counted):
  the next controller gets both when it asks (``HOST replay``);
- after ``keep_alive`` seconds with nobody attached, the agent ends, and everything it
  started ends with it: no orphans *past the lease*.

A controller comes back through the lease's own TCP listener (``_lease_line``): it proves
the job's secret, asks to attach, and the agent makes that connection its owner's. One
controller at a time: a second one is refused unless it asks to take over, which detaches
the first (told so by ``EVENT detached`` before its connection closes).

The mesh records (``HOST record``) are opaque bytes the controllers write and read back:
the agents are where a job's meshes are written down, so any agent of the job can tell a
new controller what ran there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from .._core import dumps, headers
from .._transport import Connection, TcpListener, TransportClosed
from ._lease_line import read_line, write_line
from ._lifetime import outlive_owner

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Lease", "OUTPUT_LIMIT"]

log = logging.getLogger("actormesh.hosts")

# Bytes of output kept while detached (the newest; what is dropped is counted).
OUTPUT_LIMIT = 1 << 20
# Failures kept while detached: one per worker exit or dropped actor, so a job's size
# bounds them; this bounds a job that fails in a loop.
FAILURE_LIMIT = 10_000


class Lease:
    """The lease of one host agent (see the module docstring).

    Args:
        agent: the agent holding it.
        job: the job's name.
        keep_alive: seconds the agent waits for a controller before it ends.
        controller: who started the job (``pid``, ``host``), for messages.
    """

    def __init__(
        self, agent: Agent, job: str, keep_alive: float, controller: dict[str, Any] | None = None
    ) -> None:
        self.agent = agent
        self.runtime = agent.runtime
        self.job = job
        self.keep_alive = keep_alive
        self.records: dict[str, bytes] = {}
        self.controller: dict[str, Any] = dict(controller or {})  # who is attached
        self.detached_since: float | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._output: collections.deque[tuple[str, str]] = collections.deque()
        self._output_bytes = 0
        self.output_dropped = 0
        self._failures: collections.deque[list[bytes]] = collections.deque()
        self.failures_dropped = 0
        # Workers whose exit is among the kept failures (not told to any controller yet).
        self.unreported: set[str] = set()
        host = self.runtime.advertise or "127.0.0.1"
        self._listener = TcpListener(
            host,
            0,
            secret=self.runtime.secret,
            on_accept=self._accepted,
            limits=self.runtime.limits,
        )
        self._listener.start()
        self.address = self._listener.address
        outlive_owner()
        self.runtime.on_owner_lost = self.detach
        self.runtime.owner_heard = time.monotonic()
        self._watch_owner()

    @property
    def detached(self) -> bool:
        """True while no controller is attached."""
        return self.detached_since is not None

    def lease_left(self) -> float | None:
        """Seconds until the agent ends unless a controller attaches (``None``: attached)."""
        if self.detached_since is None:
            return None
        return max(0.0, self.detached_since + self.keep_alive - time.time())

    # -- losing and finding a controller ----------------------------------------------------

    def detach(self, why: str) -> None:
        """The controller is gone (loop thread): keep serving, start counting the lease."""
        if self.detached:
            return
        log.info("job %s detached from its controller (%s); lease %g s", self.job, why,
                 self.keep_alive)  # fmt: skip
        self.detached_since = time.time()
        self.controller = {}
        # The agents below this one in a tree hear of it now, not by their own heartbeats.
        self.agent.owner_gone_below(why)
        # Gathered replies of calls that were in flight go nowhere now.
        self.agent.drop_batches()
        self._expiry = self.runtime.loop.call_later(self.keep_alive, self._expire)

    def _watch_owner(self) -> None:
        """Detach from a controller whose heartbeats stopped (its host cut off, its loop
        stuck): a connection that never closes must not hold the lease off forever."""
        config = self.runtime.config
        silent = time.monotonic() - self.runtime.owner_heard
        owner = self.runtime._parent
        if not self.detached and silent > config.heartbeat_timeout and owner is not None:
            log.warning("job %s: no heartbeat from its controller for %.0f s; detaching",
                        self.job, silent)  # fmt: skip
            self.detach(f"no heartbeat for {silent:.0f} s")
            _hang_up(owner)
        interval = min(config.heartbeat_interval, config.heartbeat_timeout / 4)
        self.runtime.loop.call_later(interval, self._watch_owner)

    def _expire(self) -> None:
        log.info("job %s: no controller for %g s, ending", self.job, self.keep_alive)
        self.end("its lease expired")

    def end(self, why: str) -> None:
        """End the agent, and so every process it started (loop thread)."""
        self._listener.close()
        self.runtime._exit_worker(why)

    def _accepted(self, sock: socket.socket) -> None:
        # On the listener's thread, the secret proven: read the request on a thread of
        # its own (a slow peer must not hold up the next), decide on the loop.
        threading.Thread(
            target=self._read_request, args=(sock,), name="actormesh-lease-request", daemon=True
        ).start()

    def _read_request(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(self.runtime.config.handshake_timeout)
            request = read_line(sock)
            sock.settimeout(None)
        except (OSError, ValueError) as error:
            log.info("a lease request could not be read: %s", error)
            sock.close()
            return
        try:
            self.runtime.loop.call_soon_threadsafe(self._answer, sock, request)
        except RuntimeError:  # the loop is closed: the agent is ending
            sock.close()

    def _answer(self, sock: socket.socket, request: dict[str, Any]) -> None:
        op = request.get("op")
        try:
            if op == "status":
                write_line(sock, {"ok": True, **self.status()})
            elif op == "kill":
                write_line(sock, {"ok": True})
                sock.close()
                self.end("killed by `actormesh kill`")
                return
            elif op == "attach":
                self._attach(sock, bool(request.get("take_over")), request.get("controller"))
                return
            else:
                write_line(sock, {"ok": False, "error": f"unknown request {op!r}"})
        except OSError as error:
            log.info("answering a lease request failed: %s", error)
        sock.close()

    def _attach(self, sock: socket.socket, take_over: bool, controller: Any) -> None:
        previous = self.runtime._parent
        if not self.detached and previous is not None and not previous.closed:
            if not take_over:
                who = _describe(self.controller)
                write_line(sock, {
                    "ok": False,
                    "error": f"job {self.job!r} already has a controller attached ({who}); "
                    "attach with take_over=True to detach it and take its place",
                })  # fmt: skip
                sock.close()
                return
            self._let_go(previous, controller)
        write_line(sock, {"ok": True, "job": self.job})
        self.controller = {**(controller if isinstance(controller, dict) else {}),
                           "since": time.time()}  # fmt: skip
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self.detached_since = None
        self.runtime.owner_heard = time.monotonic()
        conn = self.runtime._new_connection(sock, peer="controller", same_host=False)
        self.agent.adopt_owner(conn)
        conn.start()
        info = {**self.agent.info, "lease": self.describe()}
        hello = headers.Hello(self.runtime.address, os.getpid(), self.runtime.key, info)
        conn.send([headers.encode(hello)])

    def _let_go(self, previous: Connection, successor: Any) -> None:
        """Detach the controller on ``previous``: another one takes over."""
        details = {"why": f"another controller took over job {self.job!r} "
                          f"({_describe(successor)})"}  # fmt: skip
        with contextlib.suppress(TransportClosed):
            previous.send([headers.encode(headers.Event("detached", "")), dumps(details)[0]])
        self.detach("taken over")
        # On the next loop turn: the event leaves at the end of this one.
        self.runtime.loop.call_soon(_hang_up, previous)

    # -- what happens meanwhile -------------------------------------------------------------

    def keep_output(self, stream: str, text: str) -> None:
        """Output of a worker while detached: kept, the newest ``OUTPUT_LIMIT`` bytes."""
        self._output.append((stream, text))
        self._output_bytes += len(text)
        while self._output_bytes > OUTPUT_LIMIT and self._output:
            _, old = self._output.popleft()
            self._output_bytes -= len(old)
            self.output_dropped += len(old)

    def keep_failure(self, frame: list[bytes], exited: str | None = None) -> None:
        """A failure while detached (a ``FAILURE`` or ``EVENT exited`` frame): kept, in
        order; ``exited`` is the address of a worker whose exit it reports."""
        self._failures.append(frame)
        if exited is not None:
            self.unreported.add(exited)
        if len(self._failures) > FAILURE_LIMIT:
            self._failures.popleft()
            self.failures_dropped += 1

    def replay(self, owner: Connection) -> int:
        """Send what was kept to the controller now attached (loop thread); how many
        failures it got. The output first, then the failures, each in its order."""
        if self.output_dropped:
            note = (f"[actormesh] {self.output_dropped} bytes of output of job {self.job!r} "
                    "were dropped while no controller was attached\n")  # fmt: skip
            self._output.appendleft(("stderr", note))
        sent = 0
        with contextlib.suppress(TransportClosed):
            while self._output:
                stream, text = self._output.popleft()
                header = headers.encode(headers.Event("output", ""))
                owner.send([header, dumps({"stream": stream, "text": text})[0]])
            while self._failures:
                owner.send(self._failures.popleft())
                sent += 1
        self._output_bytes = self.output_dropped = 0
        self.unreported.clear()
        return sent

    # -- what it tells -----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """What a controller attaching learns: the job, its records, this host's workers."""
        workers = []
        for address, child in self.agent.workers.items():
            alive = child.alive() or address in self.unreported  # (its exit comes in replay)
            reason = None if alive else f"exited ({child.returncode})"
            workers.append(
                {"address": address, "pid": child.pid, "key": child.key, "rank": child.rank,
                 "alive": alive, "reason": reason}
            )  # fmt: skip
        return {
            "job": self.job,
            "keep_alive": self.keep_alive,
            "address": self.address,
            "records": dict(self.records),
            "workers": workers,
            "failures_kept": len(self._failures),
        }

    def status(self) -> dict[str, Any]:
        """What ``actormesh jobs`` shows of this host (JSON-ready)."""
        alive = sum(child.alive() for child in self.agent.workers.values())
        return {
            "job": self.job,
            "host": self.agent.info.get("host"),
            "attached": not self.detached,
            "controller": self.controller,
            "lease_left": self.lease_left(),
            "keep_alive": self.keep_alive,
            "workers": alive,
            "meshes": sorted(self.records),
            "failures_kept": len(self._failures),
            "output_kept": self._output_bytes,
        }


def _hang_up(conn: Connection) -> None:
    # Shut down, not only closed: a watchdog thread polling the socket (_lifetime) holds
    # it open, and the controller must hear the hang-up now.
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def _describe(controller: Any) -> str:
    if not isinstance(controller, dict) or not controller:
        return "unknown"
    return f"pid {controller.get('pid', '?')} on {controller.get('host', '?')}"
