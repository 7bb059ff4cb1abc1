"""Mutual authentication of a new stream with a shared per-job secret.

Both ends prove they know the secret before either reads a byte of a frame (frames carry
pickles, and unpickling runs code). The exchange is an HMAC-SHA256 challenge/response in
both directions, with a fresh random nonce from each side, so a recorded exchange is
worthless later and neither side ever sends the secret itself::

    connector -> acceptor   MAGIC, nonce_c
    acceptor  -> connector  MAGIC, nonce_s, HMAC(secret, "acceptor" | nonce_c | nonce_s)
    connector -> acceptor   HMAC(secret, "connector" | nonce_s | nonce_c)
    acceptor  -> connector  ACCEPTED

The role labels stop a peer from reflecting one side's proof back as its own. The last
byte lets a connector with the wrong secret fail at connect time with a clear error,
instead of seeing its first message vanish.

Each side is written once, as ``Steps`` (see ``_steps``): the connector drives its steps
on a blocking socket with a timeout; a listener drives the acceptor's steps for many
peers at once without blocking (``_gatekeeper``), so no peer can stall another.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket

from ._steps import Steps, run_blocking

__all__ = [
    "AuthenticationError",
    "accept_handshake",
    "accept_steps",
    "connect_handshake",
    "connect_steps",
    "new_secret",
    "proof",
]

MAGIC = b"actormesh-auth/1"
_NONCE = 32
_DIGEST = hashlib.sha256().digest_size
_ACCEPTED = b"\x01"


class AuthenticationError(ConnectionError):
    """The peer is not part of this job: it lacks the secret, or does not speak actormesh."""


def new_secret() -> str:
    """A fresh random per-job secret (256 bits, hex)."""
    return secrets.token_hex(32)


def proof(secret: str, role: bytes, theirs: bytes, mine: bytes) -> bytes:
    """What ``role`` sends to show it knows ``secret``, bound to both nonces."""
    return hmac.new(secret.encode(), role + b"|" + theirs + b"|" + mine, hashlib.sha256).digest()


def connect_steps(secret: str) -> Steps[None]:
    """The connecting side of the handshake.

    Raises (from the steps):
        AuthenticationError: the peer did not prove the secret or refused ours.
    """
    nonce = secrets.token_bytes(_NONCE)
    yield MAGIC + nonce
    reply = yield len(MAGIC) + _NONCE + _DIGEST
    if not reply.startswith(MAGIC):
        raise AuthenticationError("the peer does not speak the actormesh handshake")
    theirs = reply[len(MAGIC) : len(MAGIC) + _NONCE]
    expected = proof(secret, b"acceptor", nonce, theirs)
    if not hmac.compare_digest(reply[len(MAGIC) + _NONCE :], expected):
        raise AuthenticationError("the peer does not know this job's secret")
    yield proof(secret, b"connector", theirs, nonce)
    try:
        verdict = yield len(_ACCEPTED)
    except ConnectionError:
        verdict = b""
    if verdict != _ACCEPTED:
        raise AuthenticationError("the peer refused our credentials (is the secret the same?)")


def accept_steps(secret: str) -> Steps[None]:
    """The accepting side of the handshake.

    Raises (from the steps):
        AuthenticationError: the peer did not prove the secret.
    """
    hello = yield len(MAGIC) + _NONCE
    if not hello.startswith(MAGIC):
        raise AuthenticationError("the peer does not speak the actormesh handshake")
    theirs = hello[len(MAGIC) :]
    nonce = secrets.token_bytes(_NONCE)
    yield MAGIC + nonce + proof(secret, b"acceptor", theirs, nonce)
    answer = yield _DIGEST
    if not hmac.compare_digest(answer, proof(secret, b"connector", nonce, theirs)):
        raise AuthenticationError("the peer does not know this job's secret")
    yield _ACCEPTED


def connect_handshake(sock: socket.socket, secret: str) -> None:
    """Authenticate a freshly connected blocking socket from the connecting side.

    Raises:
        AuthenticationError: the peer did not prove the secret or refused ours.
        OSError: the connection failed or timed out meanwhile.
    """
    run_blocking(sock, connect_steps(secret))


def accept_handshake(sock: socket.socket, secret: str) -> None:
    """Authenticate a freshly accepted blocking socket from the accepting side.

    Raises:
        AuthenticationError: the peer did not prove the secret.
        OSError: the connection failed or timed out meanwhile.
    """
    run_blocking(sock, accept_steps(secret))
