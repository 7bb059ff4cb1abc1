"""A service whose replicas live on other hosts (issue 26): hosts are network namespaces,
each with its own agent; killing a host's agent takes its replica with it, and the
service rebuilds that replica on a host that is still there."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multihost_support import Network

import actormesh
from actormesh import HostMesh, ReplicaFailedError, host_mesh, spawn_service
from actormesh.allocators import ExternalAllocator

_ACTORS = str(Path(__file__).resolve().parents[1] / "services")
sys.path.insert(0, _ACTORS)
os.environ["PYTHONPATH"] = os.pathsep.join((_ACTORS, os.environ.get("PYTHONPATH", "")))

from service_actors import Replicated  # noqa: E402

pytestmark = pytest.mark.timeout(180)


class Lowest:
    """Every call to the lowest replica offered."""

    uses_key = False

    def choose(self, candidates: Any, in_flight: Any, key: Any = None) -> int:
        return min(candidates)


@pytest.fixture
def three_hosts(network: Network) -> Iterator[tuple[HostMesh, list[Any]]]:
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=60)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    future = host_mesh(3, allocator=allocator)
    agents = [network.start_agent(host, address, allocator.secret) for host in network.hosts]
    hosts = future.get(timeout=60)
    try:
        yield hosts, agents
    finally:
        hosts.shutdown().get(timeout=30)
        for agent in agents:
            agent.wait(timeout=15)


def test_a_replica_whose_host_agent_dies_is_rebuilt_on_another_host(
    network: Network, three_hosts: tuple[HostMesh, list[Any]]
) -> None:
    hosts, agents = three_hosts
    seen: list[actormesh.Failure] = []
    actormesh.set_failure_hook(seen.append)
    try:
        with spawn_service("far", Replicated, replicas=2, per_replica={"tp": 2},
                           hosts=hosts, router=Lowest()).get(timeout=60) as svc:  # fmt: skip
            old = set(svc.stats()[0].pids)
            # Replica 0 on the first host, replica 1 on the second; the third is free.
            assert old <= set(network.processes_in(network.hosts[0]))
            assert set(svc.stats()[1].pids) <= set(network.processes_in(network.hosts[1]))
            held = svc.hold.answer("x")
            agents[0].kill()  # SIGKILL the agent: its host is gone
            with pytest.raises(ReplicaFailedError, match="host agent"):
                held.get(timeout=60)
            svc.wait_serving().get(timeout=90)
            stats = svc.stats()
            assert [(s.state, s.restarts) for s in stats] == [("serving", 1), ("serving", 0)]
            assert set(stats[0].pids) <= set(network.processes_in(network.hosts[2]))
            answer = svc.who.answer(1).get(timeout=30)
            assert answer.replica == 0 and answer.value["pid"] in stats[0].pids
        # The dead host's workers did not outlive its agent.
        deadline = time.monotonic() + 10
        while old & set(network.processes_in(network.hosts[0])):
            assert time.monotonic() < deadline, "workers outlived their host agent"
            time.sleep(0.05)
    finally:
        actormesh.set_failure_hook(None)
    assert seen == []
