"""TCP transport: addresses, the secret handshake, and frames over real TCP sockets."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from queue import SimpleQueue

import pytest
from multihost_support import closed_on_us

from actormesh._transport import (
    AuthenticationError,
    Connection,
    Limits,
    TcpListener,
    connect_address,
    format_tcp,
    is_tcp,
    new_secret,
    parse_tcp,
    unix_path,
)
from actormesh._transport._auth import MAGIC, accept_handshake, connect_handshake, proof

SECRET = new_secret()


class Accepted:
    """What a listener let in, in order, for a test to wait on."""

    def __init__(self) -> None:
        self.sockets: SimpleQueue[socket.socket] = SimpleQueue()

    def __call__(self, sock: socket.socket) -> None:
        self.sockets.put(sock)

    def next(self, timeout: float = 10.0) -> socket.socket:
        return self.sockets.get(timeout=timeout)


@pytest.fixture
def accepted() -> Accepted:
    return Accepted()


@pytest.fixture
def listener(accepted: Accepted) -> Iterator[TcpListener]:
    server = TcpListener(
        "127.0.0.1", 0, secret=SECRET, on_accept=accepted, limits=Limits(deadline=2.0)
    )
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread of its own, like a runtime's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


# -- addresses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("tcp://10.0.0.1:29600", ("10.0.0.1", 29600)),
        ("10.0.0.1:0", ("10.0.0.1", 0)),
        ("tcp://[::1]:80", ("::1", 80)),
        ("tcp://node-7.cluster:1234", ("node-7.cluster", 1234)),
    ],
)
def test_tcp_addresses_parse_into_host_and_port(address: str, expected: tuple[str, int]) -> None:
    assert parse_tcp(address) == expected


@pytest.mark.parametrize("address", ["tcp://host", "tcp://:80", "host:http", "host:70000"])
def test_malformed_tcp_addresses_are_refused_with_the_address_named(address: str) -> None:
    with pytest.raises(ValueError, match=r"address|port"):
        parse_tcp(address)


def test_formatting_and_parsing_a_tcp_address_round_trips() -> None:
    for host, port in [("127.0.0.1", 5), ("::1", 6), ("example.org", 65535)]:
        address = format_tcp(host, port)
        assert is_tcp(address)
        assert parse_tcp(address) == (host, port)


def test_unix_addresses_are_plain_paths_with_an_optional_scheme() -> None:
    assert not is_tcp("/tmp/x.sock")
    assert not is_tcp("unix:/tmp/x.sock")
    assert unix_path("unix:/tmp/x.sock") == unix_path("/tmp/x.sock") == "/tmp/x.sock"


# -- the handshake --------------------------------------------------------------------


def test_proofs_differ_by_role_so_a_proof_cannot_be_reflected() -> None:
    a, b = b"a" * 32, b"b" * 32
    assert proof(SECRET, b"acceptor", a, b) != proof(SECRET, b"connector", a, b)
    assert proof(SECRET, b"acceptor", a, b) != proof(SECRET, b"acceptor", b, a)
    assert proof(SECRET, b"acceptor", a, b) != proof(new_secret(), b"acceptor", a, b)


def test_peers_with_the_same_secret_connect(listener: TcpListener, accepted: Accepted) -> None:
    client = connect_address(listener.address, secret=SECRET)
    server = accepted.next()
    try:
        client.sendall(b"ping")
        assert server.recv(4) == b"ping"
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert client.gettimeout() is None  # blocking again after the handshake
    finally:
        client.close()
        server.close()


def test_a_connector_with_the_wrong_secret_is_refused_and_never_handed_over(
    listener: TcpListener, accepted: Accepted
) -> None:
    with pytest.raises(AuthenticationError):
        connect_address(listener.address, secret=new_secret())
    # A peer with the secret still gets in afterwards, and is the first one handed over.
    good = connect_address(listener.address, secret=SECRET)
    try:
        server = accepted.next()
        assert server.getpeername() == good.getsockname()
        server.close()
        assert listener.refused == 1
    finally:
        good.close()


def test_a_peer_that_skips_the_handshake_is_dropped_before_its_bytes_are_read(
    listener: TcpListener, accepted: Accepted
) -> None:
    # A frame straight away (here: garbage where the handshake's magic should be).
    raw = socket.create_connection(("127.0.0.1", listener.port))
    try:
        raw.sendall(b"\x01\x00\x00\x00" + b"x" * 60)
        raw.settimeout(5)
        assert closed_on_us(raw)  # with nothing handed to the runtime
    finally:
        raw.close()
    assert accepted.sockets.empty()
    assert listener.refused == 1


def test_a_peer_that_stalls_in_the_handshake_is_dropped_after_the_timeout(
    listener: TcpListener, accepted: Accepted
) -> None:
    raw = socket.create_connection(("127.0.0.1", listener.port))
    try:
        raw.sendall(MAGIC)  # half a greeting, then silence
        raw.settimeout(10)
        assert closed_on_us(raw)  # the listener gave up on us (its timeout is 2 s)
    finally:
        raw.close()
    assert accepted.sockets.empty()


def _one_shot_server(handshake: object) -> tuple[int, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        server.close()
        conn.settimeout(5)
        try:
            handshake(conn)  # type: ignore[operator]
        except (AuthenticationError, OSError):
            pass
        finally:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def test_a_listener_without_the_secret_is_refused_by_the_connector() -> None:
    port, thread = _one_shot_server(lambda conn: accept_handshake(conn, new_secret()))
    with pytest.raises(AuthenticationError, match="does not know"):
        connect_address(format_tcp("127.0.0.1", port), secret=SECRET)
    thread.join(5)


def test_a_listener_that_does_not_speak_actormesh_is_refused() -> None:
    def banner(conn: socket.socket) -> None:
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" + b"\0" * 64)

    port, thread = _one_shot_server(banner)
    with pytest.raises(AuthenticationError, match="does not speak"):
        connect_address(format_tcp("127.0.0.1", port), secret=SECRET)
    thread.join(5)


def test_handshakes_in_both_directions_agree_on_a_socket_pair() -> None:
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def accept() -> None:
        try:
            accept_handshake(right, SECRET)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=accept)
    thread.start()
    connect_handshake(left, SECRET)
    thread.join(5)
    assert errors == []
    left.close()
    right.close()


def test_connecting_without_a_secret_fails_before_any_byte_is_sent(
    listener: TcpListener, accepted: Accepted
) -> None:
    with pytest.raises(AuthenticationError, match="no secret"):
        connect_address(listener.address, secret=None)
    assert accepted.sockets.empty()


def test_a_closed_listener_accepts_no_more_connections(accepted: Accepted) -> None:
    server = TcpListener("127.0.0.1", 0, secret=SECRET, on_accept=accepted)
    server.start()
    port = server.port
    server.close()
    server.close()  # twice is fine
    with pytest.raises(OSError):
        connect_address(format_tcp("127.0.0.1", port), secret=SECRET, timeout=2)


# -- frames over TCP --------------------------------------------------------------------


def _connection(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, frames: SimpleQueue[list[bytes]]
) -> Connection:
    conn = Connection(
        sock,
        loop,
        lambda _conn, parts: frames.put([bytes(p) for p in parts]),
        lambda _conn, _error: frames.put([]),
        max_frame_bytes=1 << 30,
        shm_threshold=0,  # TCP: buffers travel inline, after the header
        peer="tcp test",
    )
    loop.call_soon_threadsafe(conn.start)
    return conn


def test_frames_of_small_and_large_parts_cross_a_tcp_connection_both_ways(
    listener: TcpListener, accepted: Accepted, loop: asyncio.AbstractEventLoop
) -> None:
    client_frames: SimpleQueue[list[bytes]] = SimpleQueue()
    server_frames: SimpleQueue[list[bytes]] = SimpleQueue()
    client = _connection(loop, connect_address(listener.address, secret=SECRET), client_frames)
    server = _connection(loop, accepted.next(), server_frames)
    big = bytes(range(256)) * (12 * 1024 * 4)  # 12 MiB: far beyond one read
    try:
        client.send([b"header", memoryview(big), b""])
        assert server_frames.get(timeout=30) == [b"header", big, b""]
        for i in range(100):
            server.send([b"reply", str(i).encode()])
        assert [client_frames.get(timeout=10)[1] for _ in range(100)] == [
            str(i).encode() for i in range(100)
        ]
    finally:
        client.close()
    assert server_frames.get(timeout=10) == []  # the peer sees the close
