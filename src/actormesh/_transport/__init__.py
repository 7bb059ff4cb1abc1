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
from ._auth import (
    AuthenticationError,
    accept_steps,
    connect_steps,
    new_secret,
    open_accept_steps,
    open_connect_steps,
)
from ._blocking import exchange_frame, read_frame, write_frame
from ._connection import CloseHandler, Connection, TransportClosed
from ._frames import Buffer, nbytes
from ._gatekeeper import Gatekeeper, Limits
from ._link import Link, MemoryLink
from ._shm import SegmentShare
from ._shm import pool as segment_pool
from ._steps import Steps, run_blocking
from ._tcp import (
    HANDSHAKE_TIMEOUT,
    TcpListener,
    connect_tcp,
    format_tcp,
    interface_of,
    listening_socket,
    parse_tcp,
    route_source,
)
from ._unix import Listener, connect_unix, is_abstract, peer_is_trusted, private_socket_dir

__all__ = [
    "AuthenticationError",
    "Buffer",
    "CloseHandler",
    "Connection",
    "Endpoint",
    "Gatekeeper",
    "HANDSHAKE_TIMEOUT",
    "Limits",
    "Link",
    "Listener",
    "MemoryLink",
    "SegmentShare",
    "Steps",
    "TcpListener",
    "TransportClosed",
    "WorkerAddress",
    "accept_steps",
    "bind_socket",
    "connect_address",
    "connect_steps",
    "connect_tcp",
    "connect_unix",
    "dual_address",
    "exchange_frame",
    "format_tcp",
    "host_id",
    "interface_of",
    "is_abstract",
    "is_tcp",
    "listening_socket",
    "nbytes",
    "new_secret",
    "open_accept_steps",
    "open_connect_steps",
    "parse_tcp",
    "parse_worker_address",
    "peer_is_trusted",
    "private_socket_dir",
    "read_frame",
    "route",
    "route_source",
    "run_blocking",
    "segment_pool",
    "tcp_part",
    "unix_part",
    "unix_path",
    "write_frame",
]
