"""Addresses: where a process listens, as one string that names the transport too.

``"tcp://host:port"`` is a TCP listener (across hosts, authenticated); ``"unix:/path"`` or a
plain path is a Unix socket (same host, shared memory allowed). Mesh references carry
these strings, so a reference names how to reach each process from anywhere that can.
"""

from __future__ import annotations

import socket

from ._tcp import HANDSHAKE_TIMEOUT, connect_tcp, parse_tcp
from ._unix import connect_unix

__all__ = ["connect_address", "is_tcp", "unix_path"]


def is_tcp(address: str) -> bool:
    """True for a ``tcp://`` address."""
    return address.startswith("tcp://")


def unix_path(address: str) -> str:
    """The socket path of a Unix address (``"unix:/p"`` or ``"/p"``)."""
    return address.removeprefix("unix:")


def connect_address(
    address: str, *, secret: str | None = None, timeout: float = HANDSHAKE_TIMEOUT
) -> socket.socket:
    """A connected (blocking) socket to the listener at ``address``.

    TCP connections are authenticated with ``secret`` before this returns.

    Raises:
        AuthenticationError: a TCP peer that is not part of this job, or no secret.
        OSError: the listener cannot be reached.
    """
    if is_tcp(address):
        host, port = parse_tcp(address)
        return connect_tcp(host, port, secret=secret or "", timeout=timeout)
    return connect_unix(unix_path(address))
