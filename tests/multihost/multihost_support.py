"""Helpers of the multi-host tests: hosts as network namespaces, closed sockets."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from actormesh.testing import Host, Network, ip, namespace_hosts

HERE = Path(__file__).resolve().parent

__all__ = ["HERE", "Host", "Network", "closed_on_us", "ip", "namespaces_or_skip"]


def closed_on_us(sock: socket.socket) -> bool:
    """True once the peer closed ``sock`` (a reset, when our bytes were left unread)."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def namespaces_or_skip(count: int, rate: str | None = None) -> Iterator[Network]:
    """Yield ``count`` namespace hosts (``namespace_hosts``; ``rate`` limits every link),
    removed afterwards; skip the test where this machine cannot make them."""
    tools = ("ip", "tc") if rate else ("ip",)
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"multi-host tests need {' and '.join(missing)} (iproute2)")
    try:
        hosts = namespace_hosts(count, rate=rate)
        network = hosts.__enter__()
    except PermissionError as error:
        pytest.skip(f"multi-host tests need 'ip netns' (root): {error}")
    try:
        yield network
    finally:
        hosts.__exit__(None, None, None)
