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

A worker loop started with Monarch's ``ca="trust_all_connections"`` and no secret of its
own takes whoever attaches first, unauthenticated (``open_accept_steps``): the owner then
hands it the job's secret, sealed with a fresh Diffie-Hellman key (RFC 3526 group 14), so
that a passive eavesdropper does not learn it. Nothing stops an active attacker there:
that is what trusting all connections means (docs/from-monarch.md).
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
    "open_accept_steps",
    "open_connect_steps",
    "proof",
]

MAGIC = b"actormesh-auth/1"
_NONCE = 32
_DIGEST = hashlib.sha256().digest_size
_ACCEPTED = b"\x01"
# The unauthenticated attach of a worker loop that trusts all connections (see above).
OPEN_MAGIC = b"actormesh-open/1"
# RFC 3526, group 14: a 2048-bit MODP group with generator 2.
_DH_PRIME = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
    "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
    "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
    "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
    "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
    "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)
_DH_BYTES = 256
_MAX_SECRET = 4096


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


def _dh_pair() -> tuple[int, bytes]:
    private = secrets.randbits(256) | 1 << 255
    return private, pow(2, private, _DH_PRIME).to_bytes(_DH_BYTES, "big")


def _dh_key(private: int, theirs: bytes, transcript: bytes) -> bytes:
    public = int.from_bytes(theirs, "big")
    if not 1 < public < _DH_PRIME - 1:
        raise AuthenticationError("the peer sent an invalid key")
    shared = pow(public, private, _DH_PRIME).to_bytes(_DH_BYTES, "big")
    return hashlib.sha256(b"actormesh-open|" + shared + b"|" + transcript).digest()


def _seal(key: bytes, data: bytes) -> bytes:
    """``data`` XORed with a keystream of ``key`` (its own inverse; ``key`` used once)."""
    stream = b"".join(
        hashlib.sha256(key + block.to_bytes(4, "big")).digest()
        for block in range((len(data) + _DIGEST - 1) // _DIGEST)
    )
    return bytes(a ^ b for a, b in zip(data, stream, strict=False))


def open_connect_steps(secret: str) -> Steps[None]:
    """The owner's side of attaching to a worker loop that trusts all connections: no
    proof either way; the job's ``secret`` goes over sealed (see the module docstring).

    Raises (from the steps):
        AuthenticationError: the worker wants the job's secret proved instead (it has one).
    """
    private, public = _dh_pair()
    yield OPEN_MAGIC + public
    try:
        reply = yield len(OPEN_MAGIC) + _DH_BYTES
    except ConnectionError:
        raise AuthenticationError(
            "the worker refused an unauthenticated attach: it has a secret of its own "
            "(ACTORMESH_SECRET); give this controller the same one"
        ) from None
    if not reply.startswith(OPEN_MAGIC):
        raise AuthenticationError("the peer does not speak the actormesh handshake")
    theirs = reply[len(OPEN_MAGIC) :]
    key = _dh_key(private, theirs, public + theirs)
    data = secret.encode()
    yield len(data).to_bytes(2, "big") + _seal(key, data)
    verdict = yield len(_ACCEPTED)
    if verdict != _ACCEPTED:
        raise AuthenticationError("the worker refused the attach")


def open_accept_steps() -> Steps[str]:
    """A worker loop's side of an attach that trusts all connections; the job's secret,
    as the owner sent it.

    Raises (from the steps):
        AuthenticationError: the peer tried to prove a secret (this worker has none to
            check it against) or does not speak the handshake.
    """
    magic = yield len(OPEN_MAGIC)
    if magic == MAGIC:
        raise AuthenticationError(
            "the owner proves a secret, and this worker has none (it trusts all "
            "connections): set the job's ACTORMESH_SECRET here too"
        )
    if magic != OPEN_MAGIC:
        raise AuthenticationError("the peer does not speak the actormesh handshake")
    theirs = yield _DH_BYTES
    private, public = _dh_pair()
    key = _dh_key(private, theirs, theirs + public)
    yield OPEN_MAGIC + public
    size = int.from_bytes((yield 2), "big")
    if not 0 < size <= _MAX_SECRET:
        raise AuthenticationError(f"the owner sent a secret of {size} bytes")
    try:
        secret = _seal(key, (yield size)).decode()
    except UnicodeDecodeError:
        raise AuthenticationError("the owner's secret is not text") from None
    yield _ACCEPTED
    return secret


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
