"""Layer 1: frames over stream sockets (Unix sockets on one host, TCP across hosts)."""

from __future__ import annotations

from ._address import connect_address, is_tcp, unix_path
from ._auth import AuthenticationError, new_secret
from ._connection import Connection, TransportClosed
from ._gatekeeper import Gatekeeper, Limits
from ._steps import Steps, run_blocking
from ._tcp import TcpListener, connect_tcp, format_tcp, parse_tcp, route_source
from ._unix import Listener, connect_unix, is_abstract, private_socket_dir

__all__ = [
    "AuthenticationError",
    "Connection",
    "Gatekeeper",
    "Limits",
    "Listener",
    "Steps",
    "TcpListener",
    "TransportClosed",
    "connect_address",
    "connect_tcp",
    "connect_unix",
    "format_tcp",
    "is_abstract",
    "is_tcp",
    "new_secret",
    "parse_tcp",
    "private_socket_dir",
    "route_source",
    "run_blocking",
    "unix_path",
]
