"""TCP: authenticated connections between hosts, and a listener that admits only the job.

Every TCP connection runs the handshake of ``_auth`` before it is handed over, so the
framed ``Connection`` built on it never reads a byte from a peer without the job's secret.

The listener accepts and authenticates on threads of its own, not on the event loop: a
process whose loop is busy (say, opening a connection to us while we open one to it) can
still let peers in, so two processes dialling each other never wait on each other's loop.
Listeners bind to loopback unless a host is given.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

from ._auth import AuthenticationError, accept_handshake, connect_handshake

__all__ = ["HANDSHAKE_TIMEOUT", "TcpListener", "connect_tcp", "format_tcp", "parse_tcp"]

log = logging.getLogger("actormesh.transport")

# Seconds a peer gets to connect and authenticate; a stalled handshake is dropped after it.
HANDSHAKE_TIMEOUT = 10.0
_SOCKET_BUFFER = 4 * 1024 * 1024
# At most this many handshakes run at once; more peers wait in the kernel's backlog.
_MAX_HANDSHAKES = 64
# A dead host (no FIN, no RST) is noticed after about idle + interval × count seconds.
_KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}


def parse_tcp(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``"tcp://host:port"`` or ``"host:port"`` (IPv6 in brackets).

    Raises:
        ValueError: no port, or a port that is not a number in range.
    """
    rest = address.removeprefix("tcp://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        raise ValueError(f"a TCP address needs a host and a port ('host:port'), not {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"the port of {address!r} is not a number") from None
    if not 0 <= number < 65536:
        raise ValueError(f"the port of {address!r} is out of range")
    return host, number


def format_tcp(host: str, port: int) -> str:
    """The address string ``"tcp://host:port"``."""
    if ":" in host:
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


def _tune(sock: socket.socket) -> None:
    # No Nagle: frames are whole messages and latency matters more than packet count.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in _KEEPALIVE.items():
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def connect_tcp(
    host: str, port: int, *, secret: str, timeout: float = HANDSHAKE_TIMEOUT
) -> socket.socket:
    """A connected, authenticated (blocking) socket to the listener at ``host:port``.

    Raises:
        AuthenticationError: the peer is not part of this job, or refused our secret.
        OSError: it cannot be reached within ``timeout`` seconds.
    """
    if not secret:
        raise AuthenticationError("no secret to authenticate with (Config.secret)")
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        _tune(sock)
        connect_handshake(sock, secret)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


class TcpListener:
    """Accepts TCP connections from peers that know the job's secret.

    Args:
        host: interface to bind (``"127.0.0.1"``: this host only; ``"0.0.0.0"``: all).
        port: port to bind (0: any free one; see ``port``).
        secret: the job's secret.
        on_accept: called with each authenticated socket, on a listener thread (hand it
            to the event loop from there).
        handshake_timeout: seconds a peer gets to authenticate.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        secret: str,
        on_accept: Callable[[socket.socket], None],
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        if not secret:
            raise AuthenticationError("a TCP listener needs a secret (Config.secret)")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(1024)
        except BaseException:
            self._sock.close()
            raise
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._secret = secret
        self._on_accept = on_accept
        self._timeout = handshake_timeout
        self._slots = threading.BoundedSemaphore(_MAX_HANDSHAKES)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0  # peers dropped by the handshake, for tests and diagnostics

    @property
    def address(self) -> str:
        """``"tcp://host:port"`` as bound (the real port when 0 was asked for)."""
        return format_tcp(self.host, self.port)

    def start(self) -> None:
        """Begin accepting (on a daemon thread)."""
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"actormesh-tcp-{self.port}", daemon=True
        )
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, peer = self._sock.accept()
            except OSError:
                if self._closed.wait(0.1):  # out of descriptors, say: try again soon
                    return
                continue
            self._slots.acquire()
            threading.Thread(
                target=self._admit, args=(sock, peer), name="actormesh-tcp-auth", daemon=True
            ).start()

    def _admit(self, sock: socket.socket, peer: object) -> None:
        try:
            sock.settimeout(self._timeout)
            _tune(sock)
            accept_handshake(sock, self._secret)
            sock.settimeout(None)
        except (AuthenticationError, OSError) as error:
            self.refused += 1
            log.warning("refused a connection from %s: %s", peer, error)
            sock.close()
            return
        finally:
            self._slots.release()
        if self._closed.is_set():
            sock.close()
            return
        self._on_accept(sock)

    def close(self) -> None:
        """Stop accepting; safe from any thread and more than once."""
        if self._closed.is_set():
            return
        self._closed.set()
        # shutdown() wakes a thread blocked in accept(); close() alone does not on Linux.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
