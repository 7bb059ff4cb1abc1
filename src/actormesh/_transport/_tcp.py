"""TCP: authenticated connections between hosts, and a listener that admits only the job.

Every TCP connection runs the handshake of ``_auth`` before it is handed over, so the
framed ``Connection`` built on it never reads a byte from a peer without the job's secret.

The listener accepts and authenticates on a thread of its own (its gatekeeper), not on
the event loop: a process whose loop is busy (say, opening a connection to us while we
open one to it) can still let peers in, so two processes dialling each other never wait
on each other's loop. Listeners bind to loopback unless a host is given.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable

from ._auth import AuthenticationError, accept_steps, connect_handshake, open_connect_steps
from ._gatekeeper import Gatekeeper, Limits
from ._steps import run_blocking

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "TcpListener",
    "connect_tcp",
    "format_tcp",
    "interface_of",
    "listening_socket",
    "parse_tcp",
    "route_source",
]

# Seconds a connector gives a listener to accept and authenticate it.
HANDSHAKE_TIMEOUT = 10.0
_SOCKET_BUFFER = 4 * 1024 * 1024
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


def listening_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: any free port) and listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock


def connect_tcp(
    host: str,
    port: int,
    *,
    secret: str,
    timeout: float = HANDSHAKE_TIMEOUT,
    trust_all: bool = False,
) -> socket.socket:
    """A connected, authenticated (blocking) socket to the listener at ``host:port``.

    ``trust_all``: the listener is a worker loop that trusts all connections; it is
    handed ``secret`` instead of asked to prove it (``_auth.open_connect_steps``).

    Raises:
        AuthenticationError: the peer is not part of this job, or refused our secret.
        OSError: it cannot be reached within ``timeout`` seconds.
    """
    if not secret:
        raise AuthenticationError("no secret to authenticate with (Config.secret)")
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        _tune(sock)
        if trust_all:
            run_blocking(sock, open_connect_steps(secret))
        else:
            connect_handshake(sock, secret)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


class TcpListener:
    """Accepts TCP connections from peers that know the job's secret.

    Every peer's handshake runs on the listener's gatekeeper (see ``_gatekeeper``): no
    peer that connects and stalls, however many, keeps the job's own processes out.

    Args:
        host: interface to bind (``"127.0.0.1"``: this host only; ``"0.0.0.0"``: all).
        port: port to bind (0: any free one; see ``port``).
        secret: the job's secret.
        sock: a socket already bound and listening (its owner made it and handed it
            over, so its port was known before this process started); ``host`` and
            ``port`` are then read from it.
        on_accept: called with each authenticated socket, on the listener's thread (hand
            it to the event loop from there).
        limits: the handshake deadline and the caps on handshakes in progress.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        secret: str,
        on_accept: Callable[[socket.socket], None],
        limits: Limits | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        if not secret:
            raise AuthenticationError("a TCP listener needs a secret (Config.secret)")
        if sock is None:
            sock = listening_socket(host, port)
        bound = sock.getsockname()
        self.host = str(bound[0])
        self.port: int = bound[1]
        self._on_accept = on_accept
        self.gatekeeper = Gatekeeper(
            sock,
            lambda: accept_steps(secret),
            self._admitted,
            limits=limits,
            name=f"tcp {format_tcp(host, self.port)}",
        )

    @property
    def address(self) -> str:
        """``"tcp://host:port"`` as bound (the real port when 0 was asked for)."""
        return format_tcp(self.host, self.port)

    @property
    def refused(self) -> int:
        """Peers that failed the handshake (wrong secret, another protocol)."""
        return self.gatekeeper.refused

    def start(self) -> None:
        """Begin accepting (on a daemon thread)."""
        self.gatekeeper.start()

    def _admitted(self, sock: socket.socket, peer: object, result: object) -> None:
        _tune(sock)
        self._on_accept(sock)

    def close(self) -> None:
        """Stop accepting; safe from any thread and more than once."""
        self.gatekeeper.close()


def route_source(address: str) -> str:
    """The local IP address that traffic to ``address`` (``tcp://host:port``) leaves from.

    That is where peers on the way to ``address`` can reach this host. No packet is sent:
    connecting a UDP socket only picks the route.
    """
    host, port = parse_tcp(address)
    family, kind, proto, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.connect(target)
        return str(probe.getsockname()[0])


def interface_of(ip: str) -> str | None:
    """The name of the network interface that has IPv4 address ``ip`` (``None``: none)."""
    import fcntl
    import struct

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                answer = fcntl.ioctl(probe.fileno(), siocgifaddr, request)
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(answer[20:24]) == ip:
                return name
    return None
