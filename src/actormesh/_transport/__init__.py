"""Layer 1: frames over stream sockets (Unix sockets on one host, TCP across hosts)."""

from __future__ import annotations

from ._address import (
    Endpoint,
    WorkerAddress,
    bind_socket,
    connect_address,
    dual_address,
    host_id,
    is_tcp,
    parse_worker_address,
    route,
    tcp_part,
    unix_part,
    unix_path,
)
from ._auth import AuthenticationError, new_secret
from ._connection import Connection, TransportClosed
from ._gatekeeper import Gatekeeper, Limits
from ._shm import SegmentShare
from ._steps import Steps, run_blocking
from ._tcp import (
    TcpListener,
    connect_tcp,
    format_tcp,
    interface_of,
    listening_socket,
    parse_tcp,
    route_source,
)
from ._unix import Listener, connect_unix, is_abstract, private_socket_dir

__all__ = [
    "AuthenticationError",
    "Connection",
    "Endpoint",
    "Gatekeeper",
    "Limits",
    "Listener",
    "SegmentShare",
    "Steps",
    "TcpListener",
    "TransportClosed",
    "WorkerAddress",
    "bind_socket",
    "connect_address",
    "connect_tcp",
    "connect_unix",
    "dual_address",
    "format_tcp",
    "host_id",
    "interface_of",
    "is_abstract",
    "is_tcp",
    "listening_socket",
    "new_secret",
    "parse_tcp",
    "parse_worker_address",
    "private_socket_dir",
    "route",
    "route_source",
    "run_blocking",
    "tcp_part",
    "unix_part",
    "unix_path",
]
