"""Fuzzing the wire: malformed, truncated, oversized and out-of-order input on real sockets.

Two receivers are attacked, each a real one:

- a TCP listener, before authentication: random bytes, a handshake cut short or sent in
  the wrong order, a pickle that would run code. Nothing may be handed over, nothing
  unpickled, every such connection closed, and the listener keeps admitting real peers;
- a worker process, after the connection is trusted (same user): frames whose length
  table lies, headers that are not pickles, pickles of the wrong layout or an unknown
  kind, truncated frames. The worker must close that connection, say why in its log,
  and keep serving its actors.

The short form runs a few dozen examples each; ``scripts/faults --full`` runs thousands.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, SimpleQueue

import pytest
from faults_actors import Worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormesh import ActorMesh, proc_mesh
from actormesh._hosts import Runtime
from actormesh._transport import (
    Limits,
    TcpListener,
    connect_address,
    connect_unix,
    new_secret,
)
from actormesh._transport._auth import MAGIC

FULL = os.environ.get("ACTORMESH_FAULTS_FULL") == "1"
EXAMPLES = 2000 if FULL else 40
SECRET = new_secret()
_PREFIX = struct.Struct("<IQ")
# Seconds a receiver gets to close a bad connection (the handshake deadline is 1 s here).
CLOSE_WAIT = 10.0

fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not FULL,  # the short form is the same every run; the long one explores
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class _Canary:
    """Unpickling it creates a file: proof that someone unpickled what we sent."""

    path = Path(tempfile.gettempdir()) / f"actormesh-fuzz-canary-{os.getpid()}"

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def _frame(parts: list[bytes]) -> bytes:
    header = struct.pack(f"<IQ{len(parts)}Q", len(parts), sum(map(len, parts)), *map(len, parts))
    return header + b"".join(parts)


def _closed_by_peer(sock: socket.socket, timeout: float = CLOSE_WAIT) -> bool:
    """True once the other side closed (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


# -- before authentication ------------------------------------------------------------------

_handshake_input = st.one_of(
    st.binary(max_size=300),  # noise
    st.binary(min_size=32, max_size=64).map(lambda nonce: MAGIC + nonce[:32]),  # hello only
    st.binary(min_size=32, max_size=200).map(lambda rest: MAGIC + rest),  # hello + junk proof
    st.binary(min_size=32, max_size=32).map(lambda proof: proof + MAGIC),  # out of order
    st.just(_frame([pickle.dumps(("CALL",)), pickle.dumps(_Canary())])),  # a frame at once
    st.just(pickle.dumps(_Canary())),  # a bare pickle
    st.just(_PREFIX.pack(1, 1 << 62)),  # a huge length prefix
)


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[TcpListener, SimpleQueue[socket.socket]]]:
    accepted: SimpleQueue[socket.socket] = SimpleQueue()
    server = TcpListener(
        "127.0.0.1", 0, secret=SECRET, on_accept=accepted.put, limits=Limits(deadline=1.0)
    )
    server.start()
    try:
        yield server, accepted
    finally:
        server.close()


@fuzz
@given(data=_handshake_input, close_early=st.booleans())
def test_nothing_before_the_handshake_is_handed_over_or_unpickled(
    listener: tuple[TcpListener, SimpleQueue[socket.socket]], data: bytes, close_early: bool
) -> None:
    server, accepted = listener
    refused = server.refused
    dropped = server.gatekeeper.expired + server.gatekeeper.evicted
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(data)
        if close_early:
            with contextlib.suppress(OSError):  # the listener may have hung up already
                sock.shutdown(socket.SHUT_WR)
        assert _closed_by_peer(sock), "the listener kept a bad connection open"
    # Counted as refused or dropped at the deadline, never handed over.
    stats = server.gatekeeper.statistics()
    assert server.refused + stats["expired"] + stats["evicted"] > refused + dropped
    with pytest.raises(Empty):
        accepted.get_nowait()
    assert not _Canary.path.exists()


def test_the_listener_admits_a_real_peer_after_the_fuzzing(
    listener: tuple[TcpListener, SimpleQueue[socket.socket]],
) -> None:
    server, accepted = listener
    with connect_address(server.address, secret=SECRET):
        accepted.get(timeout=10).close()
    assert not _Canary.path.exists()


# -- after authentication: a worker's frame parser and header decoding ------------------------

_headers = st.one_of(
    st.binary(max_size=64),  # not a pickle
    st.tuples(st.integers(-5, 40)).map(lambda t: pickle.dumps(t)),  # a kind, nothing else
    st.tuples(st.integers(1, 12), st.none(), st.text(max_size=5)).map(pickle.dumps),
    st.lists(st.integers(), max_size=4).map(pickle.dumps),  # not a tuple
    st.just(pickle.dumps(())),  # empty
    st.just(pickle.dumps((99, "unknown kind"))),
)


@st.composite
def _bad_frames(draw: st.DrawFn) -> tuple[bytes, bool]:
    """``(bytes, complete)``: a frame that is wrong, and whether it is whole."""
    choice = draw(st.sampled_from(["header", "lengths", "truncated", "no parts"]))
    if choice == "header":
        extra = draw(st.lists(st.binary(max_size=32), max_size=3))
        return _frame([draw(_headers), *extra]), True
    if choice == "lengths":  # a length table that promises more than the body holds
        body = draw(st.binary(max_size=64))
        lengths = draw(st.lists(st.integers(0, 1 << 40), min_size=1, max_size=4))
        prefix = struct.pack(f"<IQ{len(lengths)}Q", len(lengths), len(body), *lengths)
        return prefix + body, True
    if choice == "truncated":
        whole = _frame([pickle.dumps((3, 0, "mesh", (0,), "echo")), b"x" * 40])
        cut = draw(st.integers(1, len(whole) - 1))
        return whole[:cut], False
    return _PREFIX.pack(0, 0), True


@pytest.fixture(scope="module")
def worker() -> Iterator[tuple[ActorMesh[Worker], str, int]]:
    with proc_mesh(gpus=1).get(timeout=30) as procs:
        mesh = procs.spawn("fuzzed", Worker)
        pid = mesh.pid.call_one().get(timeout=10)
        yield mesh, mesh._ref.paths[0], pid


@fuzz
@given(frame=_bad_frames())
def test_a_worker_closes_a_connection_that_sends_a_bad_frame_and_serves_on(
    worker: tuple[ActorMesh[Worker], str, int], frame: tuple[bytes, bool]
) -> None:
    mesh, path, pid = worker
    data, complete = frame
    with connect_unix(path) as sock:
        sock.sendall(data)
        if not complete:
            with contextlib.suppress(OSError):  # the peer leaves in the middle of a frame
                sock.shutdown(socket.SHUT_WR)
        assert _closed_by_peer(sock), f"the worker kept the connection after {data[:40]!r}"
    assert mesh.pid.call_one().get(timeout=10) == pid  # same process, still serving


def test_a_receiver_says_why_it_closed_a_connection(caplog: pytest.LogCaptureFixture) -> None:
    # The controller's own runtime is a receiver like any worker's, and its log is ours.
    runtime = Runtime.get()
    level = caplog.at_level(logging.WARNING, logger="actormesh")
    with level, connect_unix(runtime.listen_path) as sock:
        sock.sendall(_frame([pickle.dumps((99, "unknown kind"))]))
        assert _closed_by_peer(sock)
    assert any(
        "closing the connection" in r.getMessage() and "unknown message kind 99" in r.getMessage()
        for r in caplog.records
    )


def test_a_listener_names_the_peer_it_dropped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="actormesh"):
        server = TcpListener("127.0.0.1", 0, secret=SECRET, on_accept=lambda sock: sock.close())
        server.start()
        try:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                port = sock.getsockname()[1]
                sock.sendall(b"not the handshake" * 4)
                assert _closed_by_peer(sock)
        finally:
            server.close()
    assert any(f"127.0.0.1:{port}" in r.getMessage() for r in caplog.records)
