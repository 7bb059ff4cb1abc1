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

from .._transport import read_frame, write_frame

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
    write_frame(sock, [encode(message)])


def read_message(sock: socket.socket) -> dict[str, Any]:
    """The next message from a blocking socket.

    Raises:
        ConnectionError: the peer closed the connection.
        ValueError: a frame that is not one JSON object.
    """
    parts = read_frame(sock, "a job request", max_body=MAX_MESSAGE)
    if len(parts) != 1:
        raise ValueError(f"not a job message: {len(parts)} parts")
    return decode(parts[0])
