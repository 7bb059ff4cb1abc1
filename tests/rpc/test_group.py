"""Joining and leaving: rendezvous by env:// and tcp://, conflicts, timeouts, processes
started from shells, and the group of one (run in the test process itself)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rpc_programs
import torch
from rpc_support import free_port, run_group

import actormesh
from actormesh import rpc

# Groups of processes start slowly on a loaded machine (each imports torch).
pytestmark = pytest.mark.timeout(150)

HERE = Path(__file__).resolve().parent


@pytest.fixture
def alone() -> Iterator[None]:
    """This test process as the only worker of a group."""
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{free_port()}")
    rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=options)
    try:
        yield
    finally:
        rpc.shutdown()


def _square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def test_a_group_of_one_calls_itself_and_can_be_joined_again() -> None:
    for round_ in range(2):
        options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{free_port()}")
        rpc.init_rpc(f"solo{round_}", rank=0, world_size=1, rpc_backend_options=options)
        try:
            assert rpc.get_worker_info() == rpc.WorkerInfo(f"solo{round_}", 0)
            assert rpc.rpc_sync(0, _square, args=(torch.tensor([3.0]),)).tolist() == [9.0]
            assert rpc.remote(f"solo{round_}", _square, args=(torch.tensor([2.0]),)).to_here() == 4
        finally:
            rpc.shutdown()
    with pytest.raises(rpc.RpcNotInitialized):
        rpc.rpc_sync(0, _square, args=(torch.ones(1),))


def test_lambdas_and_closures_travel_by_value(alone: None) -> None:
    offset = 10

    def shifted(x: int) -> int:
        return x + offset

    assert rpc.rpc_sync("solo", lambda x: x * 2, args=(21,)) == 42
    assert rpc.rpc_async("solo", shifted, args=(5,)).wait() == 15


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rpc.rpc_sync("solo", "torch.add", args=(1, 2)), "function should be callable"),
        (lambda: rpc.rpc_async("solo", _square, args=5), "args must be a tuple or a list"),
        (lambda: rpc.remote("solo", _square, kwargs=[1]), "kwargs must be a dict"),
        (lambda: rpc.rpc_async("solo", _square, timeout="5"), "timeout must be a number"),
    ],
)
def test_bad_call_arguments_are_refused_at_the_call_site(
    alone: None, call: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        call()
    # Nothing was sent: the group still answers.
    assert rpc.rpc_sync("solo", _square, args=(torch.tensor([2.0]),)).tolist() == [4.0]


def test_a_rendezvous_address_served_by_something_else_is_named_as_such() -> None:
    # An HTTP server (say) where the rendezvous should be: a clear error, not a hang.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_http() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.recv(1024)

    thread = threading.Thread(target=answer_http, daemon=True)
    thread.start()
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", rpc_timeout=10)
    try:
        with pytest.raises(rpc.RendezvousError, match="does not speak actormesh's RPC rendezvous"):
            rpc.init_rpc("w1", rank=1, world_size=2, rpc_backend_options=options)
    finally:
        server.close()
        thread.join(10)


def test_init_rpc_twice_in_one_process_is_refused(alone: None) -> None:
    with pytest.raises(RuntimeError, match="already initialized"):
        rpc.init_rpc("again", rank=0, world_size=1)


def test_unknown_destinations_and_unpicklable_arguments_fail_at_the_call_site(
    alone: None,
) -> None:
    with pytest.raises(RuntimeError, match="could not find destination worker 'nobody'"):
        rpc.rpc_sync("nobody", _square, args=(torch.ones(1),))
    with pytest.raises(actormesh.SerializationError, match=r"args\[1\]"):
        rpc.rpc_sync("solo", _square, args=(torch.ones(1), threading.Lock()))


_gate = threading.Event()


def _after_gate() -> int:
    _gate.wait(30)
    return 1


def test_rpc_sync_from_a_future_callback_works_as_in_torch(alone: None) -> None:
    seen: list[object] = []

    def callback(_: torch.futures.Future[torch.Tensor]) -> None:
        seen.append(rpc.rpc_sync("solo", _square, args=(torch.ones(1) * 3,)))

    _gate.clear()
    # The callback is attached before the reply arrives: it runs on an RPC callback
    # thread (as torch's do), where waiting for another RPC is fine.
    fut = rpc.rpc_async("solo", _after_gate)
    done = fut.then(callback)
    _gate.set()
    done.wait()
    assert len(seen) == 1 and torch.equal(seen[0], torch.ones(1) * 9)


def test_a_missing_rank_zero_times_out_naming_the_rendezvous() -> None:
    options = rpc.TensorPipeRpcBackendOptions(
        rpc_timeout=0.5, init_method=f"tcp://127.0.0.1:{free_port()}"
    )
    started = time.monotonic()
    with pytest.raises(rpc.RpcTimeoutError, match="is rank 0 running"):
        rpc.init_rpc("late", rank=1, world_size=2, rpc_backend_options=options)
    assert time.monotonic() - started < 5


def test_missing_peers_time_out_naming_their_ranks() -> None:
    options = rpc.TensorPipeRpcBackendOptions(
        rpc_timeout=0.5, init_method=f"tcp://127.0.0.1:{free_port()}"
    )
    with pytest.raises(rpc.RpcTimeoutError, match=r"rank\(s\) \[1, 2\] did not join"):
        rpc.init_rpc("early", rank=0, world_size=3, rpc_backend_options=options)
    # The failed attempt left nothing behind: joining works right after.
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{free_port()}")
    rpc.init_rpc("early", rank=0, world_size=1, rpc_backend_options=options)
    rpc.shutdown()


def test_every_worker_that_came_hears_which_ranks_did_not() -> None:
    results = run_group(rpc_programs.join_a_bigger_group, 2, 3, timeout=60)
    for rank in (0, 1):
        kind, message = results[rank]
        assert kind == "RpcTimeoutError", (rank, message)
        assert "rank(s) [2] did not join" in message, (rank, message)


def test_env_rendezvous_needs_master_addr_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR and MASTER_PORT are not set"):
        rpc.init_rpc("w", rank=0, world_size=1)


@pytest.mark.parametrize("name", ["", "has space", "x" * 128, "semi;colon"])
def test_invalid_worker_names_are_refused(name: str) -> None:
    with pytest.raises(RuntimeError, match="Worker name must"):
        rpc.init_rpc(name, rank=0, world_size=1)


def test_a_name_used_twice_fails_every_worker_with_a_clear_error() -> None:
    results = run_group(rpc_programs.join_as, 2, ["same", "same"], [0, 1], timeout=60)
    for rank in (0, 1):
        kind, message = results[rank]
        assert kind == "RendezvousError"
        assert "worker name 'same' is not unique" in message


def test_a_rank_used_twice_fails_every_worker_with_a_clear_error() -> None:
    results = run_group(rpc_programs.join_as, 3, ["a", "b", "c"], [0, 1, 1], timeout=60)
    for rank in (0, 1, 2):
        kind, message = results[rank]
        assert kind == "RendezvousError"
        assert "rank 1 is used twice" in message


def test_workers_started_from_shells_meet_through_env_variables() -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    script = str(HERE / "rpc_shell_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, f"shell{rank}", str(rank), "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 0)  # started in any order
    ]
    try:
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for proc, (_, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr
    assert outputs[1][0].splitlines() == ["shell1 saw [1.0, 1.0]", "shell0 done"]
    assert outputs[0][0].splitlines() == ["shell1 done"]
