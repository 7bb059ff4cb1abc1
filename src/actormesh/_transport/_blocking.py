"""Blocking reads and frame exchanges, for handshakes before a socket joins a loop.

A new connection sometimes settles something with its peer before an event loop drives
it (the TCP secret challenge, a caller's reply route): a few bytes each way, with the
socket in blocking mode and a timeout set by the caller.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from ._frames import PREFIX, encode_header, header_size, parse_lengths, parse_prefix

__all__ = ["exchange_frame", "read_frame", "receive_exactly", "write_frame"]


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


def write_frame(sock: socket.socket, parts: Sequence[bytes]) -> None:
    """Send one frame of inline ``parts``."""
    sock.sendall(encode_header([len(p) for p in parts]) + b"".join(parts))


def read_frame(sock: socket.socket, during: str, max_body: int | None = None) -> list[bytes]:
    """The parts of the next frame from ``sock`` (inline parts only).

    Raises:
        ConnectionError: the peer closed the connection first.
        ValueError: a frame whose body is larger than ``max_body``.
    """
    nparts, body = parse_prefix(receive_exactly(sock, PREFIX.size, during), 0)
    if max_body is not None and body > max_body:
        raise ValueError(f"a frame of {body} bytes during {during} (at most {max_body})")
    table = receive_exactly(sock, header_size(nparts) - PREFIX.size, during)
    lengths = parse_lengths(PREFIX.pack(nparts, body) + table, 0, nparts)
    data = receive_exactly(sock, body, during)
    parts, offset = [], 0
    for length in lengths:
        parts.append(data[offset : offset + length])
        offset += length
    return parts


def exchange_frame(sock: socket.socket, parts: Sequence[bytes], during: str) -> list[bytes]:
    """Send one frame of inline ``parts`` and return the parts of the frame that answers."""
    write_frame(sock, parts)
    return read_frame(sock, during)
