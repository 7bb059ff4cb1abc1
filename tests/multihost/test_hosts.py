"""Meshes across hosts: workers in other network namespaces join the controller over TCP.

Each "host" is a network namespace (see ``conftest.py``); the controller is this test
process, in the root namespace. Workers run ``actormesh worker --join`` inside them, as a
cluster launcher would run it on each node.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_actors import Where
from multihost_support import HERE, Host, Network

import actormesh
from actormesh import ActorDiedError, ActorMesh, ProcMesh, proc_mesh
from actormesh.allocators import ExternalAllocator


def _mesh_on(
    network: Network, hosts: list[Host], *worker_args: list[str]
) -> tuple[ProcMesh, list[subprocess.Popen[str]]]:
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=60)
    address = allocator.listen()
    assert allocator.secret is not None
    future = proc_mesh(hosts=len(hosts), gpus=1, allocator=allocator)
    workers = [
        network.start_worker(host, address.removeprefix("tcp://"), allocator.secret, *args)
        for host, args in zip(hosts, worker_args or [[]] * len(hosts))
    ]
    return future.get(timeout=60), workers


@pytest.fixture(scope="module")
def two_hosts(network: Network) -> Iterator[tuple[ProcMesh, list[subprocess.Popen[str]]]]:
    """A mesh with one process on host 2 (rank 0, asked for) and one on host 1 (rank 1)."""
    procs, workers = _mesh_on(network, network.hosts[:2], ["--rank", "1"], ["--rank", "0"])
    try:
        yield procs, workers
    finally:
        procs.stop().get(timeout=30)


class FailureLog:
    """The failures that reached the controller, for a test to wait on."""

    def __init__(self) -> None:
        self.seen: list[actormesh.Failure] = []
        self._arrived = threading.Condition()

    def __call__(self, failure: actormesh.Failure) -> None:
        with self._arrived:
            self.seen.append(failure)
            self._arrived.notify_all()

    def wait(self, count: int, timeout: float) -> list[actormesh.Failure]:
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.seen) >= count, timeout)
            return list(self.seen)


@pytest.fixture
def failures() -> Iterator[FailureLog]:
    """Collects the failures that reach the controller instead of printing them."""
    log = FailureLog()
    actormesh.set_failure_hook(log)
    try:
        yield log
    finally:
        actormesh.set_failure_hook(None)


def _where(mesh: ActorMesh[Where]) -> list[dict[str, object]]:
    return list(mesh.where.call().get(timeout=30).values())


def test_workers_on_other_hosts_join_with_the_ranks_they_asked_for(
    network: Network, two_hosts: tuple[ProcMesh, list[subprocess.Popen[str]]]
) -> None:
    procs, _ = two_hosts
    where = procs.spawn("where", Where)
    first, second = _where(where)
    # The worker on host 2 asked for rank 0: it is {hosts=0}, and it listens on host 2.
    assert str(first["address"]).startswith(f"tcp://{network.hosts[1].ip}:")
    assert str(second["address"]).startswith(f"tcp://{network.hosts[0].ip}:")
    # Like a local worker, each one sees its coordinates in its environment.
    assert (first["env_rank"], second["env_rank"]) == ("0", "1")
    assert json.loads(str(second["env_coords"])) == {"hosts": 1, "gpus": 0}
    assert second["env_size"] == "2"


def test_a_mesh_passed_between_hosts_is_called_host_to_host(
    network: Network, two_hosts: tuple[ProcMesh, list[subprocess.Popen[str]]]
) -> None:
    procs, _ = two_hosts
    callers = procs.spawn("callers", Where)
    targets = procs.spawn("targets", Where)
    host1, host2 = network.hosts[0].ip, network.hosts[1].ip
    assert host1 not in targets.slice(hosts=0).peers.call_one().get(timeout=30)
    # The caller on host 1 ({hosts=1}) gets the mesh and calls its actor on host 2.
    reached = callers.slice(hosts=1).call_other.call_one(targets, {"hosts": 0}).get(timeout=30)
    assert str(reached["address"]).startswith(f"tcp://{host2}:")
    # Directly: host 2 now has a connection from host 1, not only from the controller.
    assert host1 in targets.slice(hosts=0).peers.call_one().get(timeout=30)


def test_killing_a_remote_worker_fails_its_pending_calls_with_actor_died_error(
    network: Network, failures: FailureLog
) -> None:
    procs, workers = _mesh_on(network, [network.hosts[2]])
    try:
        blocked = procs.spawn("blocked", Where)
        (pid,) = [value["pid"] for value in _where(blocked)]
        pending = blocked.block.call_one()
        workers[0].kill()  # `ip netns exec` became the worker: this is its pid
        assert workers[0].pid == pid
        started = time.monotonic()
        with pytest.raises(ActorDiedError, match="closed its connection"):
            pending.get(timeout=30)
        assert time.monotonic() - started < 10
        # The owner hears of the death like that of a local worker, and later calls to
        # the dead rank fail at once.
        assert [(f.mesh, f.kind) for f in failures.wait(1, 10)] == [("blocked", "died")]
        with pytest.raises(ActorDiedError):
            blocked.where.call_one().get(timeout=10)
    finally:
        procs.stop().get(timeout=30)


def test_a_worker_listening_everywhere_advertises_the_address_that_reaches_its_controller(
    network: Network,
) -> None:
    host = network.hosts[2]
    procs, _ = _mesh_on(network, [host], ["--listen-host", "0.0.0.0"])
    try:
        where = procs.spawn("where", Where)
        (value,) = _where(where)
        assert str(value["address"]).startswith(f"tcp://{host.ip}:")
        # ... and that address works: another host calls it there.
        others, _ = _mesh_on(network, [network.hosts[0]])
        try:
            caller = others.spawn("caller", Where)
            reached = caller.call_other.call_one(where, {"hosts": 0}).get(timeout=30)
            assert reached["pid"] == value["pid"]
        finally:
            others.stop().get(timeout=30)
    finally:
        procs.stop().get(timeout=30)


def test_stopping_a_mesh_ends_its_remote_workers(network: Network) -> None:
    procs, workers = _mesh_on(network, network.hosts[:2])
    procs.spawn("where", Where)
    procs.stop().get(timeout=30)
    assert [worker.wait(timeout=15) for worker in workers] == [0, 0]
    left = network.processes_in(network.hosts[0]) + network.processes_in(network.hosts[1])
    assert not {worker.pid for worker in workers} & set(left)


@pytest.mark.parametrize("state", ["idle", "frozen"])
def test_remote_workers_exit_when_their_controller_is_killed(network: Network, state: str) -> None:
    # Frozen: their event loops are blocked, so only their watch on the socket can act.
    secret = os.urandom(16).hex()
    listen = f"{network.controller_ip}:{_free_port(network.controller_ip)}"
    program = [sys.executable, str(Path(HERE, "multihost_programs.py")), "controller"]
    controller = subprocess.Popen(
        [*program, listen, "2", *(["frozen"] if state == "frozen" else [])],
        env={**os.environ, "ACTORMESH_SECRET": secret},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        workers = [network.start_worker(host, listen, secret) for host in network.hosts[:2]]
        assert controller.stdout is not None
        assert _read_line(controller.stdout, 60).startswith("READY")
        controller.kill()  # SIGKILL: no goodbye, only its sockets closing
        assert [worker.wait(timeout=15) for worker in workers] == [0, 0]
    finally:
        controller.kill()
        controller.wait(10)


def test_a_worker_without_the_secret_cannot_join(network: Network) -> None:
    allocator = ExternalAllocator(f"{network.controller_ip}:0")
    address = allocator.listen().removeprefix("tcp://")
    worker = network.start_worker(network.hosts[0], address, "not-the-secret", "--wait", "5")
    _, errors = worker.communicate(timeout=30)
    assert worker.returncode == 2
    assert "secret" in errors


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _read_line(stream: object, timeout: float) -> str:
    # The controller prints READY once its mesh is up; poll so a hang fails, not blocks.
    fileno = stream.fileno()  # type: ignore[attr-defined]
    ready, _, _ = select.select([fileno], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    return str(stream.readline())  # type: ignore[attr-defined]
