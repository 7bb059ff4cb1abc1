"""The gatekeeper: admits peers to a listening socket, one short exchange each, none blocking.

Before a peer is trusted it must finish an exchange (``Steps``: the secret challenge, a
rendezvous record). Anyone who can reach the port can open connections and then say
nothing, or one byte a second; a listener that gave each of them a thread or a slot until
a timeout would let a few hundred idle sockets keep the real peers out. So one thread
drives every exchange at once over non-blocking sockets, and three rules bound what
unfinished peers can hold:

- a deadline: a peer that has not finished ``Limits.deadline`` seconds after it
  connected is dropped, however it trickles;
- a cap on exchanges in progress, in total and per remote address: when a new peer
  would pass either, the peer that has gone longest without sending a byte (in that
  address, for the per-address cap) is dropped to make room. A real peer finishes within
  a round trip or two, so it is never the one idle longest; a flood of idle sockets
  only ever evicts itself;
- a log line naming the peer for each drop, rate-limited (one a few seconds, with the
  count of the ones not logged) so a flood cannot flood the log.

Admitted sockets are handed to ``on_admit`` on the gatekeeper's thread, in blocking mode.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._steps import Steps

__all__ = ["Gatekeeper", "Limits"]

log = logging.getLogger("actormesh.transport")

# At most this many new connections are accepted per turn, so peers already inside get
# their turn even while a flood of new ones arrives.
_ACCEPT_BATCH = 64
_LOG_EVERY = 5.0


@dataclass(frozen=True)
class Limits:
    """What peers that have not finished their exchange may hold.

    Attributes:
        deadline: seconds from connecting to the end of the exchange.
        max_pending: exchanges in progress at once, from everyone.
        max_per_host: exchanges in progress at once from one remote address.
    """

    deadline: float = 5.0
    max_pending: int = 256
    max_per_host: int = 64

    def __post_init__(self) -> None:
        if self.deadline <= 0 or self.max_pending < 1 or self.max_per_host < 1:
            raise ValueError(f"admission limits must be positive: {self}")


class _Peer:
    """One connection whose exchange is under way."""

    __slots__ = ("address", "connected", "host", "outgoing", "received", "sock", "steps", "want")

    def __init__(self, sock: socket.socket, address: Any, steps: Steps[Any]) -> None:
        self.sock = sock
        self.address = address
        self.host = str(address[0]) if isinstance(address, tuple) else str(address)
        self.steps = steps
        self.connected = time.monotonic()
        self.want = 0  # bytes the current read step still needs
        self.received = bytearray()
        self.outgoing = b""  # what the current write step has still to send

    def label(self) -> str:
        if isinstance(self.address, tuple) and len(self.address) >= 2:
            return f"{self.address[0]}:{self.address[1]}"
        return self.host or "a local peer"


class _Drops:
    """Logs dropped peers, at most one line per ``_LOG_EVERY`` seconds per listener."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._last = 0.0
        self._quiet = 0

    def report(self, peer: _Peer, why: str) -> None:
        now = time.monotonic()
        if now - self._last < _LOG_EVERY:
            self._quiet += 1
            return
        more = f" ({self._quiet} more dropped since the last report)" if self._quiet else ""
        log.warning("%s: dropped the connection from %s: %s%s", self._name, peer.label(), why, more)
        self._last, self._quiet = now, 0


class Gatekeeper:
    """Runs the exchange of every new connection to ``listener`` (see the module doc).

    Args:
        listener: a bound, listening socket; the gatekeeper owns it from now on.
        steps: makes the exchange for one new peer.
        on_admit: called with ``(sock, address, result)`` for each peer that finished
            (on the gatekeeper's thread; hand the socket on from there).
        limits: the deadline and caps.
        name: who listens, for thread names and log lines.
    """

    def __init__(
        self,
        listener: socket.socket,
        steps: Callable[[], Steps[Any]],
        on_admit: Callable[[socket.socket, Any, Any], None],
        *,
        limits: Limits | None = None,
        name: str = "listener",
    ) -> None:
        self._listener = listener
        self._steps = steps
        self._on_admit = on_admit
        self.limits = limits or Limits()
        self._name = name
        self._selector = selectors.DefaultSelector()
        # Exchanges in progress by descriptor, oldest connection first (so the first ones
        # are the first past their deadline), and by how long each has been silent.
        self._peers: OrderedDict[int, _Peer] = OrderedDict()
        self._silent: OrderedDict[int, _Peer] = OrderedDict()
        self._per_host: dict[str, OrderedDict[int, _Peer]] = {}
        self._drops = _Drops(name)
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.admitted = 0
        self.refused = 0  # failed the exchange (no secret, not our protocol) or left it
        self.expired = 0  # still unfinished at the deadline
        self.evicted = 0  # made room for newer peers

    def statistics(self) -> dict[str, int]:
        """Counts of peers admitted, refused, expired and evicted, and those in progress."""
        return {
            "admitted": self.admitted,
            "refused": self.refused,
            "expired": self.expired,
            "evicted": self.evicted,
            "pending": len(self._peers),
        }

    def start(self) -> None:
        """Begin admitting, on a daemon thread."""
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name=f"actormesh-gate-{self._name}")
        self._thread.daemon = True
        self._thread.start()

    def close(self) -> None:
        """Stop admitting and drop every unfinished peer; any thread, more than once."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        if thread is None:
            self._teardown()

    # -- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closed.is_set():
                for key, events in self._selector.select(self._wait()):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
                    else:
                        peer = self._peers.get(key.fd)
                        if peer is not None:
                            self._serve(peer, events)
                self._expire()
        except Exception:
            log.exception("%s: the gatekeeper failed; no more peers are admitted", self._name)
        finally:
            self._teardown()

    def _wait(self) -> float | None:
        if not self._peers:
            return None
        oldest = next(iter(self._peers.values()))
        return max(0.0, oldest.connected + self.limits.deadline - time.monotonic())

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of descriptors, say: the peers inside go on
                log.warning("%s: accept failed: %s", self._name, error)
                return
            sock.setblocking(False)
            peer = _Peer(sock, address, self._steps())
            self._make_room(peer.host)
            self._peers[sock.fileno()] = peer
            self._silent[sock.fileno()] = peer
            self._per_host.setdefault(peer.host, OrderedDict())[sock.fileno()] = peer
            self._advance(peer, None)

    def _make_room(self, host: str) -> None:
        same_host = self._per_host.get(host)
        if same_host is not None and len(same_host) >= self.limits.max_per_host:
            self._evict(next(iter(same_host.values())), "per-address")
        if len(self._peers) >= self.limits.max_pending:
            self._evict(next(iter(self._silent.values())), "total")

    def _evict(self, peer: _Peer, cap: str) -> None:
        self.evicted += 1
        limit = self.limits.max_per_host if cap == "per-address" else self.limits.max_pending
        self._drop(peer, f"evicted, idle, to stay under the {cap} cap of {limit} handshakes")

    def _expire(self) -> None:
        now = time.monotonic()
        while self._peers:
            oldest = next(iter(self._peers.values()))
            if now - oldest.connected < self.limits.deadline:
                return
            self.expired += 1
            self._drop(oldest, f"no complete handshake within {self.limits.deadline:g} s")

    def _serve(self, peer: _Peer, events: int) -> None:
        try:
            if peer.outgoing:
                sent = peer.sock.send(peer.outgoing)
                peer.outgoing = peer.outgoing[sent:]
                if peer.outgoing:
                    return
                self._advance(peer, b"")
                return
            chunk = peer.sock.recv(peer.want - len(peer.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._drop(peer, f"connection failed: {error}", quiet=True)
            return
        if not chunk:
            self._advance(peer, ConnectionError("the peer closed the connection"))
            return
        self._silent.move_to_end(peer.sock.fileno())
        self._per_host[peer.host].move_to_end(peer.sock.fileno())
        peer.received += chunk
        if len(peer.received) == peer.want:
            data, peer.received = bytes(peer.received), bytearray()
            self._advance(peer, data)

    def _advance(self, peer: _Peer, given: bytes | ConnectionError | None) -> None:
        """Run the peer's steps until they wait for the network, finish or fail."""
        while True:
            try:
                if given is None:
                    step = next(peer.steps)
                elif isinstance(given, ConnectionError):
                    step = peer.steps.throw(given)
                else:
                    step = peer.steps.send(given)
            except StopIteration as done:
                self._admit(peer, done.value)
                return
            except Exception as error:
                self.refused += 1
                # A peer that left has nothing to report; a failed exchange says why.
                self._drop(peer, f"{type(error).__name__}: {error}", quiet=error is given)
                return
            if isinstance(step, int):
                peer.want = step
                self._watch(peer, selectors.EVENT_READ)
                return
            try:
                sent = peer.sock.send(step)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as error:
                self._drop(peer, f"connection failed: {error}", quiet=True)
                return
            if sent < len(step):
                peer.outgoing = step[sent:]
                self._watch(peer, selectors.EVENT_WRITE)
                return
            given = b""

    def _watch(self, peer: _Peer, events: int) -> None:
        try:
            self._selector.modify(peer.sock, events)
        except KeyError:
            self._selector.register(peer.sock, events)

    def _forget(self, peer: _Peer) -> None:
        fd = peer.sock.fileno()
        self._peers.pop(fd, None)
        self._silent.pop(fd, None)
        same_host = self._per_host.get(peer.host)
        if same_host is not None:
            same_host.pop(fd, None)
            if not same_host:
                del self._per_host[peer.host]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(peer.sock)
        peer.steps.close()

    def _drop(self, peer: _Peer, why: str, *, quiet: bool = False) -> None:
        self._forget(peer)
        peer.sock.close()
        if quiet:
            log.debug("%s: %s left during its handshake: %s", self._name, peer.label(), why)
        else:
            self._drops.report(peer, why)

    def _admit(self, peer: _Peer, result: Any) -> None:
        self._forget(peer)
        self.admitted += 1
        peer.sock.setblocking(True)
        try:
            self._on_admit(peer.sock, peer.address, result)
        except Exception:
            log.exception(
                "%s: handing over the connection from %s failed", self._name, peer.label()
            )
            peer.sock.close()

    def _teardown(self) -> None:
        for peer in list(self._peers.values()):
            self._forget(peer)
            peer.sock.close()
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)
        self._selector.close()
        # shutdown() first: close() alone leaves a blocked accept() elsewhere asleep.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
