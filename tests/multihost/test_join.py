"""Join mode on one host (loopback): ExternalAllocator, the worker command, the runtime's
TCP listener. The same paths across real network namespaces are in ``test_hosts.py``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping

import pytest
from multihost_actors import Where
from multihost_support import closed_on_us

from actormesh import proc_mesh
from actormesh._core import headers
from actormesh._hosts import Runtime
from actormesh._hosts._joining import join_order
from actormesh._hosts._remote import Joined
from actormesh._transport._frames import encode_header as encode_frame
from actormesh.allocators import Allocator, ExternalAllocator, LocalAllocator


def _worker(address: str, secret: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "actormesh._cli", "worker", "--join", address, *args],
        env={**os.environ, "ACTORMESH_SECRET": secret},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _listening() -> tuple[ExternalAllocator, str, str]:
    allocator = ExternalAllocator("127.0.0.1:0", timeout=60)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    return allocator, address, allocator.secret


def test_the_runtime_listens_on_loopback_unless_told_otherwise() -> None:
    assert Runtime.get().listen_tcp().startswith("tcp://127.0.0.1:")


def test_processes_that_join_before_the_mesh_is_asked_for_wait_for_it() -> None:
    allocator, address, secret = _listening()
    early = _worker(address, secret)
    runtime = Runtime.get()
    joined = threading.Event()

    def watch() -> None:  # the lobby is loop-thread state: look at it from there
        if runtime.children.joins.waiting():
            joined.set()
        elif early.poll() is None:
            runtime.loop.call_later(0.05, watch)

    runtime.call_soon(watch)
    assert joined.wait(30), "the early worker never joined"
    procs = proc_mesh(1, allocator=allocator).get(timeout=60)
    try:
        where = procs.spawn("where", Where)
        assert where.where.call_one().get(timeout=30)["pid"] == early.pid
    finally:
        procs.stop().get(timeout=30)
    assert early.wait(15) == 0


def test_a_mesh_that_waits_for_more_processes_than_join_times_out_and_sends_them_away() -> None:
    allocator, address, secret = _listening()
    allocator = ExternalAllocator(address, timeout=2)
    future = proc_mesh(2, allocator=allocator)
    lone = _worker(address, secret)
    with pytest.raises(TimeoutError, match="1 of 2 processes joined"):
        future.get(timeout=30)
    assert lone.wait(15) == 0  # told to go: nothing is left running


def test_a_worker_without_a_secret_refuses_to_start() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ACTORMESH_SECRET"}
    result = subprocess.run(
        [sys.executable, "-m", "actormesh._cli", "worker", "--join", "127.0.0.1:1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "ACTORMESH_SECRET" in result.stderr


def test_a_worker_gives_up_on_an_unreachable_controller_after_its_wait() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = _worker(f"127.0.0.1:{port}", "s", "--wait", "1")
    _, errors = worker.communicate(timeout=60)
    assert worker.returncode == 1
    assert "no controller" in errors


def test_a_peer_without_the_secret_cannot_join_even_with_a_well_formed_hello() -> None:
    _, address, _ = _listening()
    host, port = address.rsplit(":", 1)
    header = headers.encode(headers.Hello("tcp://127.0.0.1:9", 1, "intruder", {}))
    frame = encode_frame([len(header)]) + header
    with socket.create_connection((host, int(port))) as raw:
        raw.sendall(frame)
        raw.settimeout(15)
        assert closed_on_us(raw)
    runtime = Runtime.get()
    assert runtime.submit(_lobby(runtime)).result(10) == []


async def _lobby(runtime: Runtime) -> list[Joined]:
    return runtime.children.joins.waiting()


def test_restarts_need_local_processes() -> None:
    with pytest.raises(ValueError, match="restart='rank' needs processes"):
        proc_mesh(2, allocator=ExternalAllocator(), restart="rank")


def test_an_allocator_must_have_start_and_stop() -> None:
    assert isinstance(LocalAllocator(), Allocator)
    assert isinstance(ExternalAllocator(), Allocator)
    with pytest.raises(TypeError, match="start"):
        proc_mesh(2, allocator=object())  # type: ignore[arg-type]


def _joined(pid: int, host: str, **info: object) -> Joined:
    return Joined(None, f"tcp://{host}:1", pid, f"k{pid}", {"host": host, **info})  # type: ignore[arg-type]


def _pids(order: list[Joined]) -> list[int]:
    return [j.pid for j in order]


def test_joined_processes_take_the_ranks_they_ask_for() -> None:
    joined = [_joined(1, "a", rank=2), _joined(2, "b", rank=0), _joined(3, "a", rank=1)]
    assert _pids(join_order(joined)) == [2, 3, 1]


def test_joined_processes_without_ranks_are_ordered_host_by_host() -> None:
    info: Mapping[int, tuple[str, int]] = {
        1: ("b", 1), 2: ("a", 1), 3: ("b", 0), 4: ("a", 0),
    }  # fmt: skip
    joined = [_joined(pid, host, local_rank=local) for pid, (host, local) in info.items()]
    assert _pids(join_order(joined)) == [4, 2, 3, 1]
