"""Helpers of the multi-host tests: hosts as network namespaces, closed sockets."""

from __future__ import annotations

import socket
from pathlib import Path

from actormesh.testing import Host, Network, ip

HERE = Path(__file__).resolve().parent

__all__ = ["HERE", "Host", "Network", "closed_on_us", "ip"]


def closed_on_us(sock: socket.socket) -> bool:
    """True once the peer closed ``sock`` (a reset, when our bytes were left unread)."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
