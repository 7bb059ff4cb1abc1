"""Bulk data of a cast down a chain of host agents, across rate-limited namespaces.

Four namespace hosts whose links send at most 50 Mbit/s each way (``tc``), one agent
and two workers each; the controller is this test process. A cast of a few MiB goes
down the chain (``Config.bulk_threshold`` lowered for it): every worker must get bytes
identical to the payload, in the one shared-memory copy of its host, the controller
must send the payload once, and an agent killed in the middle of the chain must fail
its own ranks only, the hosts after it getting the data from its parent.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from multihost_actors import Keeper
from multihost_support import Network, namespaces_or_skip

import actormesh
from actormesh import ActorDiedError, ActorMesh, HostMesh, ProcMesh, host_mesh
from actormesh._core import headers
from actormesh._hosts import Runtime
from actormesh._hosts._routed import as_routed
from actormesh.allocators import ExternalAllocator
from actormesh.testing import wait_until

pytestmark = pytest.mark.timeout(240)

MIB = 1 << 20


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    """Four namespaces whose every link runs at 50 Mbit/s (a shadow of conftest's)."""
    yield from namespaces_or_skip(4, rate="50mbit")


@pytest.fixture
def quick_stalls(monkeypatch: pytest.MonkeyPatch) -> float:
    """Agents started after this give up on a silent peer after 3 s (not 30)."""
    Runtime.get()  # (this process' runtime keeps the timeout it started with)
    monkeypatch.setenv("ACTORMESH_HEARTBEAT_TIMEOUT", "3")
    return 3.0


@pytest.fixture
def procs(network: Network, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProcMesh]:
    """Two workers on each of the four hosts; bulk casts from 1 MiB on, here and there."""
    yield from _procs_on(network, monkeypatch)


@pytest.fixture
def tree_keepers(network: Network, monkeypatch: pytest.MonkeyPatch) -> Iterator[ActorMesh[Keeper]]:
    """Keepers on two workers of each of the four hosts, whose agents form a tree of
    fan-out 2: hosts 0 and 1 at the top, 2 and 3 below host 0."""
    for procs in _procs_on(network, monkeypatch, fan_out=2):
        yield procs.spawn("keeper", Keeper)


def _procs_on(
    network: Network, monkeypatch: pytest.MonkeyPatch, **mesh_options: Any
) -> Iterator[ProcMesh]:
    monkeypatch.setenv("ACTORMESH_BULK_THRESHOLD", str(MIB))  # (agents and workers)
    monkeypatch.setenv("ACTORMESH_BULK_CHUNK", str(64 << 10))
    runtime = Runtime.get()
    config = runtime.config.replace(bulk_threshold=MIB, bulk_chunk=64 << 10, bulk_fanout=1)
    monkeypatch.setattr(runtime, "config", config)
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=60)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    future = host_mesh(4, allocator=allocator, **mesh_options)
    agents = [network.start_agent(host, address, allocator.secret) for host in network.hosts]
    hosts: HostMesh = future.get(timeout=60)
    failures: list[actormesh.Failure] = []
    actormesh.set_failure_hook(failures.append)  # a killed agent's ranks: expected
    try:
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        yield procs
        procs.stop().get(timeout=60)
        hosts.shutdown().get(timeout=60)
    finally:
        actormesh.set_failure_hook(None)
        allocator.close()
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
            agent.wait(timeout=15)


@pytest.fixture
def chain(procs: ProcMesh) -> ActorMesh[Keeper]:
    """Keepers on every worker."""
    return procs.spawn("keeper", Keeper)


def _payload(size: int) -> tuple[Any, str]:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    return data, hashlib.sha256(memoryview(data)).hexdigest()


class _SentBytes:
    """Bytes the controller sends to its agents, by frame kind."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by_kind: dict[int, int] = {}
        for conn in Runtime.get().agents:

            def counting(parts: Any, share: Any = None, _send: Any = conn.send) -> None:
                kind = headers.decode(parts[0])[0]
                size = sum(memoryview(part).nbytes for part in parts)
                self.by_kind[kind] = self.by_kind.get(kind, 0) + size
                _send(parts, share)

            monkeypatch.setattr(conn, "send", counting)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


@pytest.mark.parametrize("fanout", [1, 2])
def test_a_large_cast_leaves_the_controller_once_and_every_worker_maps_its_hosts_copy(
    chain: ActorMesh[Keeper], fanout: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime.get()
    monkeypatch.setattr(runtime, "config", runtime.config.replace(bulk_fanout=fanout))
    data, want = _payload(4 * MIB)
    sent = _SentBytes(monkeypatch)
    chain.take.broadcast(data)
    # Asked right after, with no wait: each agent holds this call behind the bulk cast
    # until its data is in, so every actor already has it.
    digests = chain.digest.call().get(timeout=120)
    assert list(digests.values()) == [want] * 8
    # Once down the chain, not once per host (a star sends 4 x 4 MiB).
    assert 4 * MIB <= sent.by_kind.get(headers.BULK_DATA, 0) < 4 * MIB + 16 * 1024
    assert sent.total < 4 * MIB + 64 * 1024  # the rest: headers, the small casts
    mappings = list(chain.mapping.call().get(timeout=60).values())
    for host in range(4):
        (name, inode), (_, other_inode) = mappings[2 * host : 2 * host + 2]
        # The two workers of a host map one memory file, the agent's: no copy each.
        assert "memfd:actormesh" in name and inode == other_inode != 0
    assert len({inode for _, inode in mappings}) == 4
    assert runtime.bulk.transfers == {}  # the controller's copy was let go


def test_a_large_cast_in_a_tree_goes_down_the_chain_once_and_after_the_calls_before_it(
    tree_keepers: ActorMesh[Keeper], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime.get()
    assert sum(as_routed(conn) is not None for conn in runtime.agents) == 2  # hosts 2, 3
    small, small_digest = _payload(4096)
    data, want = _payload(4 * MIB)
    sent = _SentBytes(monkeypatch)
    # A call sent just before the bulk cast, and one just after, with no wait: each
    # agent keeps the order, the later one held until its host has the data.
    tree_keepers.take.broadcast(small)
    before = tree_keepers.digest.call()
    tree_keepers.take.broadcast(data)
    after = tree_keepers.digest.call()
    assert list(before.get(timeout=120).values()) == [small_digest] * 8
    assert list(after.get(timeout=120).values()) == [want] * 8
    # Once down the chain, not once per child link of the tree (2 x 4 MiB).
    assert 4 * MIB <= sent.by_kind.get(headers.BULK_DATA, 0) < 4 * MIB + 16 * 1024
    assert sent.by_kind.get(headers.TREE_CAST, 0) + sent.by_kind.get(headers.PLANNED_CAST, 0) < MIB
    assert runtime.bulk.transfers == {}


def test_an_agent_killed_mid_chain_fails_its_ranks_and_the_hosts_after_it_still_get_the_data(
    chain: ActorMesh[Keeper],
) -> None:
    runtime = Runtime.get()
    data, want = _payload(16 * MIB)  # about 2.7 s per 50 Mbit/s link
    future = chain.take.call(data)
    wait_until(lambda: bool(runtime.bulk.transfers), 30, "the transfer to start")
    (transfer,) = runtime.bulk.transfers.values()
    # The chain's order: the controller feeds its first host, which feeds the second...
    second = transfer.subtree[2][0]
    (link,) = [link for link in runtime.agents.values() if link.process.listen_path == second]
    wait_until(
        lambda: any(child.acked >= 2 * MIB for child in transfer.children.values()),
        60,
        "the first host to hold 2 MiB",
    )
    os.kill(link.process.pid, signal.SIGKILL)  # the second agent, mid-transfer
    with pytest.raises(ActorDiedError, match="host agent"):
        future.get(timeout=120)
    hosts = [address for address, _ in transfer.subtree[1:]]
    dead = hosts.index(second)
    for index in range(4):
        if index == dead:
            continue
        # Held at each live agent behind the bulk cast: answered once its data is in.
        digests = chain.slice(hosts=index).digest.call().get(timeout=120)
        assert list(digests.values()) == [want] * 2, f"host {index}"
    wait_until(lambda: runtime.bulk.transfers == {}, 60, "the controller to let its copy go")


def test_the_agents_chain_dials_each_other_with_the_jobs_secret(
    network: Network, chain: ActorMesh[Keeper]
) -> None:
    data, _ = _payload(2 * MIB)
    assert set(chain.take.call(data).get(timeout=120).values()) == {2 * MIB}
    # A peer without the secret is refused by an agent's listener before any frame.
    link = next(iter(Runtime.get().agents.values()))
    host, port = link.process.listen_path.removeprefix("tcp://").rsplit(":", 1)
    probe = (
        "import sys; from actormesh._transport import connect_tcp; "
        "connect_tcp(sys.argv[1], int(sys.argv[2]), secret='wrong', timeout=5)"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", network.hosts[3].netns, sys.executable, "-c", probe, host, port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Authentication" in done.stderr


def _agent_link(chain: ActorMesh[Keeper], host: int) -> Any:
    """The controller's link to the agent of ``host`` (the parent of its workers)."""
    pid = chain.slice(hosts=host, gpus=0).parent.call_one().get(timeout=60)
    (link,) = [link for link in Runtime.get().agents.values() if link.process.pid == pid]
    return link


def _ip(link: Any) -> str:
    return str(link.process.listen_path).removeprefix("tcp://").rsplit(":", 1)[0]


def test_a_frozen_agent_mid_chain_is_cut_off_and_the_hosts_after_it_get_the_data(
    quick_stalls: float, chain: ActorMesh[Keeper]
) -> None:
    runtime = Runtime.get()
    host_of = {_agent_link(chain, host).process.listen_path: host for host in range(4)}
    data, want = _payload(16 * MIB)
    future = chain.take.call(data)
    wait_until(lambda: bool(runtime.bulk.transfers), 30, "the transfer to start")
    (transfer,) = runtime.bulk.transfers.values()
    order = [address for address, _ in transfer.subtree[1:]]
    (second,) = [link for link in runtime.agents.values() if link.process.listen_path == order[1]]
    wait_until(
        lambda: any(child.acked >= 2 * MIB for child in transfer.children.values()),
        60,
        "the first host to hold 2 MiB",
    )
    os.kill(second.process.pid, signal.SIGSTOP)  # frozen: its connections stay open
    try:
        for index, address in enumerate(order):
            if address == order[1]:
                continue
            # Its parent cuts the frozen agent off after 3 s and feeds the hosts after it.
            digests = chain.slice(hosts=host_of[address]).digest.call().get(timeout=120)
            assert list(digests.values()) == [want] * 2, f"host {index} of the chain"
    finally:
        os.kill(second.process.pid, signal.SIGKILL)
    with pytest.raises(ActorDiedError, match="host agent"):
        future.get(timeout=120)


def test_a_host_cut_off_from_the_agent_before_it_fails_its_ranks_naming_itself(
    network: Network, quick_stalls: float, chain: ActorMesh[Keeper]
) -> None:
    first, second = _agent_link(chain, 0), _agent_link(chain, 1)
    namespaces = {host.ip: host.netns for host in network.hosts}
    cut = [(namespaces[_ip(first)], _ip(second)), (namespaces[_ip(second)], _ip(first))]
    for netns, peer in cut:  # the two agents no longer reach each other; both reach us
        subprocess.run(["ip", "-n", netns, "route", "add", "blackhole", peer], check=True)
    try:
        data, want = _payload(4 * MIB)
        with pytest.raises(ActorDiedError, match="stopped arriving at the host agent") as caught:
            chain.take.call(data).get(timeout=120)
        assert _ip(second) in str(caught.value)  # the host that got nothing names itself
        runtime = Runtime.get()
        assert list(runtime.bulk.transfers) == []
        for host in (0, 2, 3):  # the first agent fed the hosts after the cut-off one
            digests = chain.slice(hosts=host).digest.call().get(timeout=120)
            assert list(digests.values()) == [want] * 2, f"host {host}"
    finally:
        for netns, peer in cut:
            subprocess.run(["ip", "-n", netns, "route", "del", "blackhole", peer], check=False)


def test_sync_weights_sends_a_trainers_weights_down_the_generators_agents_once(
    procs: ProcMesh,
) -> None:
    from multihost_actors import TorchPeer

    from actormesh.torch import sync_weights

    trainers = procs.slice(hosts=0, gpus=0).spawn("trainers", TorchPeer, 0, 1024)
    generators = procs.slice(gpus=1).spawn("generators", TorchPeer, 1, 1024)  # 4 hosts
    trained = trainers.weight_sum.call_one().get(timeout=60)
    report = sync_weights(trainers, generators, version=1).get(timeout=120)
    assert report.version == 1 and report.bytes > 4 * MIB  # a 1024 x 1024 float32 weight
    assert list(generators.weight_sum.call().get(timeout=60).values()) == [trained] * 4
    # The weight left the trainer once, down the generators' agents: not once per host.
    sent = trainers.bulk_sent.call_one().get(timeout=60)
    assert 4 * MIB <= sent < report.bytes + MIB
