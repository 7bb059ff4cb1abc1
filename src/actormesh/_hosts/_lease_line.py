"""The control line of a leased job: one JSON line each way, after the secret is proven.

A leased host agent (``_lease``) listens on a TCP port of its own for controllers that
come back. Whoever connects first proves the job's secret (the HMAC handshake of
``_transport._auth``, run by the listener's gatekeeper before a byte of the request is
read), then sends one request as a JSON line and gets one JSON line back:

- ``{"op": "status"}``: what the agent knows of the job (lease left, workers, meshes);
- ``{"op": "kill"}``: end the job on this host (the agent, its workers, their actors);
- ``{"op": "attach", "take_over": bool, "controller": {...}}``: become the job's
  controller on this host. On ``{"ok": true}`` the same socket carries frames from then
  on, as any owner's connection does (the agent's ``HELLO`` comes first).

JSON, not pickle: nothing a peer sends here is unpickled, and nothing at all is read
from a peer that did not prove the secret.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from .._transport import AuthenticationError, connect_tcp, parse_tcp

__all__ = ["AttachRefusedError", "ask", "read_line", "write_line"]

# A request or answer is small (mesh names, a few numbers): a longer line is refused.
MAX_LINE = 1 << 16


class AttachRefusedError(RuntimeError):
    """A leased job's agent refused a controller (another one is attached, say)."""


AttachRefusedError.__module__ = "actormesh"  # caught as actormesh.AttachRefusedError


def write_line(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send ``message`` as one JSON line (blocking)."""
    sock.sendall(json.dumps(message).encode() + b"\n")


def read_line(sock: socket.socket) -> dict[str, Any]:
    """Read one JSON line (blocking, byte by byte: the frames that may follow it on the
    same socket stay there for whoever reads them next).

    Raises:
        ConnectionError: the peer closed before a whole line came.
        ValueError: the line is too long or is not a JSON object.
    """
    data = bytearray()
    while not data.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise ConnectionError("the peer closed the connection before answering")
        data += byte
        if len(data) > MAX_LINE:
            raise ValueError(f"a control line longer than {MAX_LINE} bytes")
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("a control line that is not a JSON object")
    return message


def ask(
    address: str, secret: str, request: dict[str, Any], timeout: float
) -> tuple[socket.socket, dict[str, Any]]:
    """Connect to the leased agent at ``address`` (``tcp://``), prove ``secret``, send
    ``request``; the socket (blocking, still open) and the agent's answer.

    Raises:
        AuthenticationError: the agent holds another secret.
        AttachRefusedError: the agent said no (its reason is the message).
        OSError: nobody answers at ``address`` (the job ended, or the host is gone).
    """
    host, port = parse_tcp(address)
    sock = connect_tcp(host, port, secret=secret, timeout=timeout)
    try:
        sock.settimeout(timeout)
        write_line(sock, request)
        try:
            answer = read_line(sock)
        except ConnectionError as error:
            # A listener that rejects the secret hangs up during the handshake; one that
            # took it answers. A hang-up here is the agent ending.
            raise ConnectionResetError(f"the agent at {address} hung up: {error}") from None
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    if not answer.get("ok", False):
        sock.close()
        raise AttachRefusedError(str(answer.get("error", "refused")))
    return sock, answer


_ = AuthenticationError  # raised by connect_tcp, documented above
