"""Addresses: where a process listens, as one string that names the transport too.

``"tcp://host:port"`` is a TCP listener (across hosts, authenticated); ``"unix:/path"``,
``"@name"`` or a plain path is a Unix socket (same host, shared memory allowed). A process
reachable both ways has a *dual* address, ``"<unix>|tcp://host:port|<host id>"``: a
caller on the same host (same boot and network namespace: the host id) takes the Unix
socket, any other the TCP one (``route``). Mesh references carry these strings, so a
reference names how to reach each process from anywhere that can.
"""

from __future__ import annotations

import functools
import os
import socket

from ._tcp import HANDSHAKE_TIMEOUT, connect_tcp, parse_tcp
from ._unix import connect_unix

__all__ = [
    "connect_address",
    "dual_address",
    "host_id",
    "is_tcp",
    "route",
    "tcp_part",
    "unix_part",
    "unix_path",
]


@functools.cache
def host_id() -> str:
    """What tells this host from others: its boot and its network namespace.

    Processes with the same id reach each other's Unix sockets (abstract names live in
    the network namespace); others, only TCP.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = socket.gethostname()
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return f"{boot_id}.{netns}"


def dual_address(unix: str, tcp: str) -> str:
    """The address of a process of this host that listens at ``unix`` and ``tcp``."""
    return f"{unix}|{tcp}|{host_id()}"


def route(address: str) -> str:
    """The one address to dial from here: of a dual address, the Unix socket on its own
    host and the TCP listener elsewhere; any other address as it is."""
    if "|" not in address:
        return address
    unix, tcp, host = address.split("|", 2)
    return unix if host == host_id() else tcp


def tcp_part(address: str) -> str | None:
    """The TCP address of a TCP or dual address (``None`` for a Unix-only one)."""
    if is_tcp(address):
        return address
    parts = address.split("|")
    return parts[1] if len(parts) == 3 else None


def unix_part(address: str) -> str:
    """The Unix socket path of a Unix or dual address."""
    return unix_path(address.split("|", 1)[0])


def is_tcp(address: str) -> bool:
    """True for a ``tcp://`` address."""
    return address.startswith("tcp://")


def unix_path(address: str) -> str:
    """The socket path of a Unix address (``"unix:/p"`` or ``"/p"``)."""
    return address.removeprefix("unix:")


def connect_address(
    address: str, *, secret: str | None = None, timeout: float = HANDSHAKE_TIMEOUT
) -> socket.socket:
    """A connected (blocking) socket to the listener at ``address`` (routed, if dual).

    TCP connections are authenticated with ``secret`` before this returns.

    Raises:
        AuthenticationError: a TCP peer that is not part of this job, or no secret.
        OSError: the listener cannot be reached.
    """
    address = route(address)
    if is_tcp(address):
        host, port = parse_tcp(address)
        return connect_tcp(host, port, secret=secret or "", timeout=timeout)
    return connect_unix(unix_path(address))
