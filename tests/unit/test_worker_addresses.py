"""Worker-loop addresses in Monarch's spelling (``parse_worker_address``, ``bind_socket``)
and the unauthenticated attach of a worker loop that trusts all connections."""

from __future__ import annotations

import socket
import threading
from collections.abc import Generator
from typing import Any

import pytest

from actormesh._transport import Endpoint, bind_socket, parse_worker_address
from actormesh._transport._auth import (
    AuthenticationError,
    accept_steps,
    connect_steps,
    open_accept_steps,
    open_connect_steps,
)
from actormesh._transport._steps import run_blocking


@pytest.mark.parametrize(
    ("text", "dial", "bind", "proc_id"),
    [
        ("tcp://10.0.0.1:4444", "tcp://10.0.0.1:4444", "tcp://10.0.0.1:4444", None),
        ("10.0.0.1:4444", "tcp://10.0.0.1:4444", "tcp://10.0.0.1:4444", None),
        ("tcp://[::1]:7", "tcp://[::1]:7", "tcp://[::1]:7", None),
        ("tcp://worker-fqdn:4444", "tcp://worker-fqdn:4444", "tcp://worker-fqdn:4444", None),
        ("ipc:///tmp/w/0", "unix:/tmp/w/0", "unix:/tmp/w/0", None),
        ("ipc://@name", "unix:@name", "unix:@name", None),
        ("unix:/tmp/s", "unix:/tmp/s", "unix:/tmp/s", None),
        ("tcp://h:5@tcp://0.0.0.0:5", "tcp://h:5", None, None),
        ("service<E4>@tcp://10.0.0.1:5", "tcp://10.0.0.1:5", "tcp://10.0.0.1:5", "service<E4>"),
        ("service@tcp://h:5@tcp://0.0.0.0:6", "tcp://h:5", None, "service"),
        ("service@10.0.0.1:5", "tcp://10.0.0.1:5", "tcp://10.0.0.1:5", "service"),
    ],
)  # fmt: skip
def test_every_form_parses_to_where_to_dial_and_where_to_bind(
    text: str, dial: str, bind: str | None, proc_id: str | None
) -> None:
    address = parse_worker_address(text)
    assert address.dial.address == dial
    if bind is not None:
        assert address.bind.address == bind
    assert address.proc_id == proc_id


def test_an_alias_binds_its_right_side_and_an_fd_form_names_a_descriptor() -> None:
    alias = parse_worker_address("tcp://h:5@tcp://0.0.0.0:6")
    assert alias.bind == Endpoint("tcp", host="0.0.0.0", port=6)
    inherited = parse_worker_address("tcp://127.0.0.1:fd12")
    assert inherited.bind == Endpoint("tcp", host="127.0.0.1", fd=12)
    with pytest.raises(ValueError, match="inherits; dial the port"):
        inherited.dial.address  # noqa: B018 (nothing to dial: the port is the worker's)
    with pytest.raises(ValueError, match="no address to dial"):
        parse_worker_address("tcp://*:4444").dial.address  # noqa: B018
    assert parse_worker_address("tcp://*:4444").bind.host == "*"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("metatls://h:4444", "tcp:// and ipc://"),
        ("inproc://3423", "tcp:// and ipc://"),
        ("tcp://h", "needs HOST:PORT"),
        ("tcp://h:", "needs HOST:PORT"),
        ("tcp://h:70000", "no port"),
        ("tcp://h:p", "no port"),
        ("tcp://::1:5", "brackets"),
        ("ipc://", "no socket path"),
        ("tcp://h:5@ipc:///x", "one transport and dials another"),
        ("tcp://h:fd3@tcp://0.0.0.0:5", "cannot be an inherited socket"),
        ("bad id@tcp://h:5", "no proc id"),
        ("tcp://a:1@tcp://b:2@tcp://c:3", "not ADDRESS"),
        ("", "not ADDRESS"),
    ],
)
def test_a_bad_address_says_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_worker_address(text)


def test_a_worker_address_is_a_string() -> None:
    with pytest.raises(TypeError):
        parse_worker_address(4444)  # type: ignore[arg-type]


def test_bind_socket_listens_on_an_inherited_descriptor_bound_or_listening() -> None:
    for listen_first in (False, True):
        original = socket.socket()
        original.bind(("127.0.0.1", 0))
        if listen_first:
            original.listen()
        port = original.getsockname()[1]
        adopted = bind_socket(Endpoint("tcp", host="127.0.0.1", fd=original.detach()))
        try:
            assert adopted.getsockname()[1] == port
            assert adopted.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        finally:
            adopted.close()


def test_bind_socket_refuses_a_descriptor_that_is_no_tcp_socket() -> None:
    left, right = socket.socketpair()
    try:
        with pytest.raises(ValueError, match="not a TCP socket"):
            bind_socket(Endpoint("tcp", host="127.0.0.1", fd=left.fileno()))
        assert left.fileno() >= 0  # left open: it is not ours
    finally:
        left.close()
        right.close()


def test_bind_socket_names_a_wildcard_and_localhost_without_resolving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_dns(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"resolved a name: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(socket, "gethostbyname", no_dns)
    for host, bound in [("*", "0.0.0.0"), ("localhost", "127.0.0.1"), ("127.0.0.1", "127.0.0.1")]:
        sock = bind_socket(Endpoint("tcp", host=host, port=0))
        try:
            assert sock.getsockname()[0] == bound
        finally:
            sock.close()


def test_bind_socket_takes_over_a_stale_unix_socket_file(tmp_path: Any) -> None:
    path = str(tmp_path / "w")
    first = bind_socket(Endpoint("unix", path=path))
    first.close()  # the file stays, nobody listens: a killed worker's
    second = bind_socket(Endpoint("unix", path=path))
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
    finally:
        second.close()
    live = bind_socket(Endpoint("unix", path=path))  # a listening one is not taken over
    try:
        with pytest.raises(OSError, match="in use"):
            bind_socket(Endpoint("unix", path=path))
    finally:
        live.close()


# -- the unauthenticated attach ------------------------------------------------------------


def _drive(
    connector: Generator[Any, bytes, Any], acceptor: Generator[Any, bytes, Any]
) -> tuple[Any, bytes]:
    """Run both sides of an exchange in memory; the acceptor's result and every byte."""
    wire = bytearray()
    buffers = {id(connector): bytearray(), id(acceptor): bytearray()}
    steps = {id(connector): next(connector), id(acceptor): next(acceptor)}
    peer = {id(connector): acceptor, id(acceptor): connector}
    results: dict[int, Any] = {}
    while len(results) < 2:
        progressed = False
        for side in (connector, acceptor):
            key = id(side)
            if key in results:
                continue
            step = steps[key]
            try:
                if isinstance(step, bytes):
                    wire.extend(step)
                    buffers[id(peer[key])].extend(step)
                    steps[key] = side.send(b"")
                    progressed = True
                elif len(buffers[key]) >= step:
                    data = bytes(buffers[key][:step])
                    del buffers[key][:step]
                    steps[key] = side.send(data)
                    progressed = True
            except StopIteration as done:
                results[key] = done.value
                progressed = True
        assert progressed, "the exchange is stuck"
    return results[id(acceptor)], bytes(wire)


def test_the_job_secret_reaches_an_open_worker_sealed() -> None:
    secret = "the-job-secret-" + "x" * 40
    given, wire = _drive(open_connect_steps(secret), open_accept_steps())
    assert given == secret
    assert secret.encode() not in wire  # an eavesdropper does not read it
    # A fresh key each time: the same secret never looks the same on the wire twice.
    _, again = _drive(open_connect_steps(secret), open_accept_steps())
    assert wire[-len(secret) - 1 :] != again[-len(secret) - 1 :]


def test_the_two_handshakes_refuse_each_other_with_a_reason() -> None:
    for connector, acceptor, reason in [
        (connect_steps("s"), open_accept_steps(), "has none"),
        (open_connect_steps("s"), accept_steps("s"), "actormesh handshake"),
    ]:
        left, right = socket.socketpair()
        errors: list[BaseException] = []

        def accept(
            sock: socket.socket = right, steps: Any = acceptor, errors: list[Any] = errors
        ) -> None:
            try:
                run_blocking(sock, steps)
            except AuthenticationError as error:
                errors.append(error)
            finally:
                sock.close()

        thread = threading.Thread(target=accept)
        thread.start()
        left.settimeout(10)
        with pytest.raises((AuthenticationError, ConnectionError)):
            run_blocking(left, connector)
        thread.join(10)
        left.close()
        assert len(errors) == 1 and reason in str(errors[0])
