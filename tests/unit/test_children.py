"""The runtime's ``Children`` part alone (``_hosts/_children.py``): what the core asks it
(HELLOs, heartbeat answers, lost connections, shutdown) and how it handles the death of
a process it owns, with no runtime, no socket and no process.

The part gets from its runtime only what ``Below`` names; here that is a small object
that records what it is told. Processes here are adopted ones (``RemoteProcess``), whose
death is their connection closing, so none needs starting. Real workers, started,
killed and restarted, are the integration and fault tests.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from actormesh import Config
from actormesh._core import NO_PROCESSES, headers
from actormesh._hosts._aggregate import LineAggregator
from actormesh._hosts._children import Children
from actormesh._hosts._process import ChildProcess
from actormesh._hosts._remote import Joined, RemoteProcess
from actormesh._transport import Buffer, Connection, SegmentShare

pytestmark = pytest.mark.timeout(30)
T = TypeVar("T")


class _Conn(Connection):
    """A connection's state and what was sent on it, with no socket (``Children`` only
    sends pings and shutdowns, reads what is left and closes)."""

    def __init__(self, peer: str = "incoming tcp") -> None:  # no super(): no socket
        self.peer = peer
        self._closed = False
        self.sent: list[tuple[Any, ...]] = []
        self.read_out = 0

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        self.sent.append(pickle.loads(bytes(parts[0])))

    def read_remaining(self) -> None:
        self.read_out += 1

    def close(self) -> None:
        self._closed = True


class _Below:
    """The runtime under the part: what it was told, on a loop of its own."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.config = Config(event_log=False, output="off", progress="never")
        self.socket_dir = "/nonexistent"
        self.listen_path = "/nonexistent/owner.sock"
        self.secret = "s"
        self.advertise: str | None = None
        self.conns: dict[str, Connection] = {}
        self.dead: dict[str, str] = {}
        self.failed: list[tuple[Connection, str]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    @property
    def progress_mode(self) -> str:
        return "never"

    @property
    def output_lines(self) -> LineAggregator | None:
        return None

    def connection_at(self, path: str) -> Connection | None:
        return self.conns.get(path)

    def name_connection(self, path: str, conn: Connection) -> None:
        self.conns[path] = conn

    def mark_dead(self, path: str, reason: str) -> None:
        self.dead[path] = reason

    def revive(self, path: str) -> None:
        self.dead.pop(path, None)

    def fail_connection(
        self, conn: Connection, reason: str, routed_before: int | None = None
    ) -> None:
        self.failed.append((conn, reason))

    def record_event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def flush_output(self) -> None:
        pass

    def in_loop_thread(self) -> bool:
        return True

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        coro.close()
        raise AssertionError("not called on the loop thread")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _hello(address: str, pid: int = 42) -> tuple[Any, ...]:
    header: tuple[Any, ...] = pickle.loads(
        headers.encode(headers.Hello(address, pid, "k1", {"host": "h1"}))
    )
    return header


def _joined(address: str, conn: _Conn) -> Joined:
    return Joined(conn, address, 42, "k1", {"host": "h1"})


def _settle(loop: asyncio.AbstractEventLoop) -> None:
    """Run what the part scheduled for now (a death is handled on the next turn)."""
    loop.run_until_complete(asyncio.sleep(0))


def test_a_process_that_owns_none_refuses_a_hello() -> None:
    with pytest.raises(ValueError, match="owns no workers"):
        NO_PROCESSES.hello(_Conn(), _hello("tcp://h1:1"))
    assert not NO_PROCESSES.owns_processes()


def test_a_hello_from_a_process_it_did_not_start_waits_to_be_adopted(
    loop: asyncio.AbstractEventLoop,
) -> None:
    below = _Below(loop)
    children = Children(below)
    conn = _Conn()
    children.hello(conn, _hello("tcp://h1:1"))
    (joined,) = children.joins.waiting()
    assert joined.conn is conn and joined.address == "tcp://h1:1" and joined.pid == 42
    assert below.conns == {} and not children.owns_processes()


def test_an_adopted_process_whose_connection_closes_is_dead_to_everyone_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    below = _Below(loop)
    children = Children(below)
    conn = _Conn()
    heard: list[tuple[ChildProcess, str]] = []
    children.exit_listeners.append(lambda child, reason: heard.append((child, reason)))
    below.dead["tcp://h1:1"] = "an earlier process there died"
    child = children.adopt(_joined("tcp://h1:1", conn), rank=3)
    assert isinstance(child, RemoteProcess) and children.owns_processes()
    assert below.conns == {"tcp://h1:1": conn} and conn.peer == "tcp://h1:1"
    assert below.dead == {}  # adopted there: reachable again
    assert children.heartbeat is not None  # probed from now on

    conn.close()
    assert children.connection_closed(conn, None)
    _settle(loop)
    ((dead, reason),) = heard
    assert dead is child and reason.startswith("process 42 (rank 3) on h1 closed its connection")
    assert below.failed == [(conn, reason)]  # what waited on it fails, once
    assert below.dead == {"tcp://h1:1": reason}
    assert conn.read_out >= 1  # its last frames were read before its death was told
    assert [kind for kind, _ in below.events] == ["process_exit"]
    assert below.events[0][1]["rank"] == 3 and below.events[0][1]["asked"] is False


def test_a_connection_of_no_process_of_ours_is_told_to_the_close_listeners(
    loop: asyncio.AbstractEventLoop,
) -> None:
    children = Children(_Below(loop))
    closed: list[Connection] = []
    children.close_listeners.append(closed.append)
    conn = _Conn()
    assert not children.connection_closed(conn, None)
    assert closed == [conn]  # and the core fails what waited on it itself


def test_heartbeat_answers_reach_the_monitor_and_the_pong_listener(
    loop: asyncio.AbstractEventLoop,
) -> None:
    below = _Below(loop)
    children = Children(below)
    pongs: list[str] = []
    children.pong_listener = pongs.append
    conn = _Conn()
    child = children.adopt(_joined("tcp://h1:1", conn), rank=0)
    monitor = children.heartbeat
    assert monitor is not None
    children.answered("tcp://h1:1")
    assert pongs == ["tcp://h1:1"]
    # The monitor probes the process on its connection (a PING), from the loop.
    assert children.monitor() is monitor and children._probe(child, 5)
    assert conn.sent == [(headers.PING, 5)]


def test_at_shutdown_leased_processes_are_left_running_and_the_others_ended(
    loop: asyncio.AbstractEventLoop,
) -> None:
    children = Children(_Below(loop))
    killed: list[str] = []
    leased_conn, own_conn = _Conn(), _Conn()
    leased = children.adopt(_joined("tcp://h1:1", leased_conn), 0, lambda: killed.append("h1"))
    children.adopt(_joined("tcp://h2:1", own_conn), 1, lambda: killed.append("h2"))

    class _Leases:
        def leased(self, child: ChildProcess) -> bool:
            return child is leased

        def agent_exited(self, process: RemoteProcess, how: str) -> None:
            pass

    children.agents = _Leases()
    # The loop is not running: no SHUTDOWN first; a remote process' kill is its
    # connection closing and its holder's kill.
    children.stop_all()
    assert killed == ["h2"] and own_conn.closed and not leased_conn.closed
