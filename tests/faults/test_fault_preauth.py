"""Peers that connect and never authenticate cannot keep the job's processes out.

Before this, 300 idle connections to an ``ExternalAllocator``'s port held every handshake
slot for its whole timeout and no real worker could join. Each test here floods a real
listener with idle sockets and a slow-drip client (one byte a second), then checks that
the real peers get in within seconds and the attackers are dropped.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from faults_actors import Worker

from actormesh import proc_mesh
from actormesh._transport._auth import MAGIC
from actormesh.allocators import ExternalAllocator
from actormesh.rpc._rendezvous import Member, rendezvous

IDLE_PEERS = 1000


class Flood:
    """Idle sockets and one slow-drip client against ``host:port``, closed on exit."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.idle = [socket.create_connection((host, port)) for _ in range(count)]
        self.drip = socket.create_connection((host, port))
        self.drip_closed_after: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        # One byte a second of something that looks like the start of a handshake.
        started = time.monotonic()
        for byte in (MAGIC * 4)[:60]:
            try:
                self.drip.send(bytes([byte]))
            except OSError:
                break
            if self._stop.wait(1.0):
                return
        self.drip_closed_after = time.monotonic() - started

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in [*self.idle, self.drip]:
            sock.close()


@contextlib.contextmanager
def flooded(host: str, port: int, count: int = IDLE_PEERS) -> Iterator[Flood]:
    flood = Flood(host, port, count)
    try:
        yield flood
    finally:
        flood.close()


def _join(address: str, secret: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "actormesh._cli", "worker", "--join", address, "--wait", "30"],
        env={**os.environ, "ACTORMESH_SECRET": secret},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )


@pytest.mark.timeout(90)
def test_workers_join_while_a_thousand_idle_peers_and_a_slow_drip_hold_the_port(
    figures: Any,
) -> None:
    allocator = ExternalAllocator("127.0.0.1:0", timeout=45)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    host, port = address.rsplit(":", 1)
    with flooded(host, int(port)) as flood:
        started = time.monotonic()
        workers = [_join(address, allocator.secret) for _ in range(2)]
        try:
            procs = proc_mesh(gpus=2, allocator=allocator).get(timeout=60)
            figures.add("preauth_join_s", time.monotonic() - started)
            with procs:
                mesh = procs.spawn("w", Worker)
                assert mesh.echo.call(7).get(timeout=30).values() == [7, 7]
            # The slow drip is dropped at the handshake deadline, however it trickles.
            flood._thread.join(30)
            assert flood.drip_closed_after is not None
            figures.add("slowdrip_dropped_s", flood.drip_closed_after)
            assert flood.drip_closed_after < 15
        finally:
            allocator.close()
            for worker in workers:
                worker.wait(30)


@pytest.mark.timeout(90)
def test_the_rpc_rendezvous_completes_while_idle_peers_hold_its_port(figures: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    members = [Member(f"w{rank}", rank, 2, "localhost", os.getpid(), "", "") for rank in (0, 1)]
    results: dict[int, list[Member]] = {}

    def run(rank: int) -> None:
        results[rank] = rendezvous(members[rank], ("127.0.0.1", port), timeout=40)[0]

    leader = threading.Thread(target=run, args=(0,), daemon=True)
    leader.start()
    flood = None
    deadline = time.monotonic() + 10
    while flood is None:
        try:
            flood = Flood("127.0.0.1", port, 300)
        except ConnectionRefusedError:  # rank 0 is not listening yet
            assert time.monotonic() < deadline, "rank 0 never listened"
            time.sleep(0.05)
    try:
        started = time.monotonic()
        run(1)
        figures.add("preauth_rendezvous_s", time.monotonic() - started)
        leader.join(30)
        assert [m.name for m in results[0]] == ["w0", "w1"]
        assert results[1] == results[0]
    finally:
        flood.close()
