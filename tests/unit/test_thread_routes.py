"""A thread's reply route reads every reply meant for it, whatever happens around it.

Sync code's thread reads its replies itself (``ThreadRoute.pump``), polling the route's
connections, one per process it calls. These tests hold the cases where the set of
connections changes under it: the poll must watch the connections the route has now
(even when Python gives a new connection a freed one's ``id()``, which the poll's cache
once took for "unchanged"), and a connection opened while the runtime adopted the route
must not be named in a call (nobody would read it: the call then hung until its timeout,
the cause of an intermittent failure of the RDMA tests).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from actormesh._core import _reply_routes
from actormesh._core._reply_routes import ThreadRoute

pytestmark = pytest.mark.timeout(30)


class FakeConnection:
    """The part of a ``Connection`` a route's poll uses, over a real socket."""

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock
        self.closed = False
        self.reads = 0

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def read_ready(self) -> None:
        assert self.sock is not None
        self.sock.recv(64)
        self.reads += 1

    def close(self) -> None:
        self.closed = True
        if self.sock is not None:
            self.sock.close()


@pytest.fixture
def route() -> Iterator[ThreadRoute]:
    loop = asyncio.new_event_loop()
    route = ThreadRoute(
        loop,
        "t/1",
        lambda sock, loop, path: FakeConnection(sock),  # type: ignore[arg-type,return-value]
        lambda route: None,
        lambda route: None,
    )
    try:
        yield route
    finally:
        route.close()
        loop.close()


def _answered(
    route: ThreadRoute, path: str, conn: FakeConnection | None = None
) -> tuple[FakeConnection, socket.socket]:
    """A connection of ``route`` to ``path`` with a reply waiting (``conn``: this object)."""
    ours, theirs = socket.socketpair()
    if conn is None:
        conn = FakeConnection(ours)
    conn.sock = ours
    route._conns[path] = conn  # type: ignore[assignment]
    theirs.send(b"reply")
    return conn, theirs


def test_a_new_connection_is_polled_after_the_old_one_closed(route: ThreadRoute) -> None:
    # The process behind the route's one connection died: the connection closed, and a
    # wait ran before the runtime's loop told the route to forget it.
    first, first_peer = _answered(route, "proc-a")
    first.close()
    first_peer.close()
    route.pump(lambda: False, timeout=0.01)
    route.forget(first)  # type: ignore[arg-type]

    # The next call opens a connection to the new process. CPython gives the freed
    # object's block to the next object of its size: the case this test is about.
    del first
    second, second_peer = _answered(route, "proc-b", FakeConnection(None))
    route.pump(lambda: second.reads > 0, timeout=5)
    assert second.reads == 1, "the reply on the new connection was never read"
    second_peer.close()
    second.close()


def test_closed_connections_are_not_polled(route: ThreadRoute) -> None:
    open_one, peer = _answered(route, "proc-a")
    closed_one, closed_peer = _answered(route, "proc-b")
    closed_one.close()
    closed_peer.close()
    _, by_fd = route._poller()
    assert list(by_fd.values()) == [open_one]  # type: ignore[comparison-overlap]
    peer.close()
    open_one.close()


def test_a_route_adopted_while_a_process_confirms_it_does_not_name_its_token(
    route: ThreadRoute, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The thread opens a route connection to a process (a round trip to its loop, which
    # may be busy for a while); meanwhile the runtime finds the thread stalled and adopts
    # the route. The new connection was not among those it moved to its loop: nobody
    # would read it, so the call must not name the route's token.
    opened: list[socket.socket] = []

    def open_while_adopted(path: str, token: str) -> socket.socket:
        assert route.claim()
        assert route.adopt(route.loop) is False  # idle: the runtime closes it
        ours, theirs = socket.socketpair()
        opened.extend((ours, theirs))
        return ours

    monkeypatch.setattr(_reply_routes, "_open", open_while_adopted)
    assert route.token_for("unix:/nowhere/proc-c.sock") is None
    assert route._conns == {}
    assert opened[0].fileno() == -1, "the connection nobody reads was left open"
    opened[1].close()


def test_a_process_that_did_not_confirm_a_route_is_tried_again_later(
    route: ThreadRoute, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its loop may have been busy for a while: after _RETRY_REFUSED seconds the route is
    # opened again, not refused for the life of the thread.
    attempts: list[str] = []
    peers: list[socket.socket] = []

    def busy_then_ready(path: str, token: str) -> socket.socket:
        attempts.append(path)
        if len(attempts) == 1:
            raise OSError("no confirmation in time")
        ours, theirs = socket.socketpair()
        peers.append(theirs)
        return ours

    monkeypatch.setattr(_reply_routes, "_open", busy_then_ready)
    path = "unix:/nowhere/proc-d.sock"
    assert route.token_for(path) is None  # refused
    assert route.token_for(path) is None  # not tried again at once
    assert len(attempts) == 1
    monkeypatch.setattr(_reply_routes, "_RETRY_REFUSED", 0.0)
    assert route.token_for(path) == route.token
    assert len(attempts) == 2
    for peer in peers:
        peer.close()
