"""``PortForwarder``: TCP forwarded between two processes of a mesh, both ways, with ends
of stream passed on; stopping the forwarder closes its listeners; bad input is refused.
Monarch's own ``test_port_forward.py`` also passes (scripts/monarch-suite)."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from actormesh.actor import ActorError, ProcMesh, this_host, this_proc
from actormesh.job import PortForwarder


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture(scope="module")
def procs() -> Iterator[ProcMesh]:
    mesh = this_host().spawn_procs(per_host={"procs": 2})
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=60)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _round_trip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:

        def send() -> None:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)  # our end of stream travels to the echo

        sender = threading.Thread(target=send)
        sender.start()
        chunks = []
        while chunk := conn.recv(65536):  # the echo's end of stream comes back too
            chunks.append(chunk)
        sender.join()
    return b"".join(chunks)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_forward_carries_bytes_both_ways_until_the_forwarder_stops(
    procs: ProcMesh, echo_port: int
) -> None:
    source_port = _free_port()
    forwarder = this_proc().spawn("forwarder", PortForwarder)
    forwarder.forward.call_one(
        procs.slice(procs=0), echo_port, procs.slice(procs=1), f"127.0.0.1:{source_port}"
    ).get(timeout=60)
    payload = bytes(range(256)) * 8192  # 2 MiB
    assert _round_trip(source_port, payload) == payload
    assert _round_trip(source_port, b"again") == b"again"
    forwarder.stop().get(timeout=60)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", source_port), timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bad_forwards_are_refused_and_leave_nothing_listening(procs: ProcMesh) -> None:
    forwarder = this_proc().spawn("forwarder", PortForwarder)
    try:
        with pytest.raises(ActorError, match="same shape"):
            forwarder.forward.call_one(procs, 1, procs.slice(procs=0), "127.0.0.1:1").get()
        with pytest.raises(ActorError, match="1 through 65535"):
            forwarder.forward.call_one(procs, 0, procs, "127.0.0.1:1").get()
        with pytest.raises(ActorError, match="address:port"):
            forwarder.forward.call_one(procs, 1, procs, "no-port").get()
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = [_free_port(), taken.getsockname()[1]]
        with pytest.raises(ActorError):  # the second source cannot listen
            forwarder.forward.call_one(
                procs, 9, procs, lambda point: f"127.0.0.1:{ports[point['procs']]}"
            ).get(timeout=60)
        taken.close()
        with socket.socket() as probe:  # the first source let its port go again
            probe.bind(("127.0.0.1", ports[0]))
    finally:
        forwarder.stop().get(timeout=60)
