"""Blocking reads and frame exchanges, for handshakes before a socket joins a loop.

A new connection sometimes settles something with its peer before an event loop drives
it (the TCP secret challenge, a caller's reply route): a few bytes each way, with the
socket in blocking mode and a timeout set by the caller.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from ._frames import PREFIX, encode_header, header_size, parse_lengths, parse_prefix

__all__ = ["exchange_frame", "receive_exactly"]


def receive_exactly(sock: socket.socket, size: int, during: str = "a handshake") -> bytes:
    """Exactly ``size`` bytes from ``sock``.

    Raises:
        ConnectionError: the peer closed the connection first.
    """
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"the peer closed the connection during {during}")
        data += chunk
    return bytes(data)


def exchange_frame(sock: socket.socket, parts: Sequence[bytes], during: str) -> list[bytes]:
    """Send one frame of inline ``parts`` and return the parts of the frame that answers."""
    sock.sendall(encode_header([len(p) for p in parts]) + b"".join(parts))
    nparts, body = parse_prefix(receive_exactly(sock, PREFIX.size, during), 0)
    table = receive_exactly(sock, header_size(nparts) - PREFIX.size, during)
    lengths = parse_lengths(PREFIX.pack(nparts, body) + table, 0, nparts)
    data = receive_exactly(sock, body, during)
    answer, offset = [], 0
    for length in lengths:
        answer.append(data[offset : offset + length])
        offset += length
    return answer
