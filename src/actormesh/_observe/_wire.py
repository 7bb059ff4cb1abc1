"""The job socket's messages: one JSON object per frame, both ways.

JSON, not pickle: the ``actormesh`` command may come from another installation than the
job's, and what crosses is plain data (tables, stacks, lines of a debugger session).
Requests carry an ``id`` that their answer repeats; messages the job sends on its own (a
debugger's output, a session that opened) carry an ``event`` instead. The controller
reads frames on its event loop (``actormesh._transport.Connection``); the command uses
the blocking functions here.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from .._transport._blocking import receive_exactly
from .._transport._frames import PREFIX, encode_header, header_size, parse_lengths, parse_prefix

__all__ = ["decode", "encode", "read_message", "write_message"]

MAX_MESSAGE = 64 << 20  # the largest frame either side accepts


def encode(message: dict[str, Any]) -> bytes:
    """The one part of a frame carrying ``message``."""
    return json.dumps(message, separators=(",", ":"), default=str).encode()


def decode(part: bytes | memoryview) -> dict[str, Any]:
    """The message in a frame's part.

    Raises:
        ValueError: not a JSON object.
    """
    message = json.loads(bytes(part))
    if not isinstance(message, dict):
        raise ValueError(f"a job message must be a JSON object, not {type(message).__name__}")
    return message


def write_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message on a blocking socket."""
    part = encode(message)
    sock.sendall(encode_header([len(part)]) + part)


def read_message(sock: socket.socket) -> dict[str, Any]:
    """The next message from a blocking socket.

    Raises:
        ConnectionError: the peer closed the connection.
        ValueError: a frame that is not one JSON object.
    """
    nparts, body = parse_prefix(receive_exactly(sock, PREFIX.size, "a job request"), 0)
    if nparts != 1 or body > MAX_MESSAGE:
        raise ValueError(f"not a job message: {nparts} parts, {body} bytes")
    table = receive_exactly(sock, header_size(nparts) - PREFIX.size, "a job request")
    parse_lengths(PREFIX.pack(nparts, body) + table, 0, nparts)
    return decode(receive_exactly(sock, body, "a job request"))
