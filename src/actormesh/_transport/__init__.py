"""Layer 1: frames over stream sockets (Unix domain sockets on one host)."""

from __future__ import annotations

from ._connection import Connection, TransportClosed
from ._unix import Listener, connect_unix, private_socket_dir

__all__ = ["Connection", "Listener", "TransportClosed", "connect_unix", "private_socket_dir"]
