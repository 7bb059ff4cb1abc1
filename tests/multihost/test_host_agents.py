"""Host meshes across real network namespaces: one agent per "host", casts through agents.

Each namespace runs ``actormesh host --join`` (its host agent), as a cluster launcher
would run it on every node; the controller is this test process in the root namespace.
"""

from __future__ import annotations

import json
import operator
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multihost_actors import Where
from multihost_support import HERE, Network, ip

import actormesh
from actormesh import ActorDiedError, ActorMesh, HostMesh, ProcMesh, host_mesh
from actormesh._core import headers
from actormesh._hosts import Runtime
from actormesh._hosts._forkserver import available as forks_available
from actormesh._transport import Connection, route
from actormesh.allocators import ExternalAllocator

pytestmark = pytest.mark.timeout(180)


def _agents_on(network: Network, count: int) -> tuple[HostMesh, list[subprocess.Popen[str]]]:
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=60)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    future = host_mesh(count, allocator=allocator)
    agents = [
        network.start_agent(host, address, allocator.secret) for host in network.hosts[:count]
    ]
    return future.get(timeout=60), agents


@pytest.fixture(scope="module")
def hosts(network: Network) -> Iterator[HostMesh]:
    """A host mesh of the three namespaces, one agent each."""
    mesh, agents = _agents_on(network, 3)
    try:
        yield mesh
    finally:
        mesh.shutdown().get(timeout=30)
        assert [agent.wait(timeout=15) for agent in agents] == [0, 0, 0]


@pytest.fixture(scope="module")
def procs(hosts: HostMesh) -> Iterator[ProcMesh]:
    mesh = hosts.spawn_procs(per_host={"gpus": 2})
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture(scope="module")
def where(procs: ProcMesh) -> ActorMesh[Where]:
    return procs.spawn("where", Where)


class Failures:
    """The failures that reach the controller, collected for one test."""

    def __init__(self) -> None:
        self.seen: list[actormesh.Failure] = []

    def __call__(self, failure: actormesh.Failure) -> None:
        self.seen.append(failure)


@pytest.fixture
def failures() -> Iterator[Failures]:
    collected = Failures()
    actormesh.set_failure_hook(collected)
    try:
        yield collected
    finally:
        actormesh.set_failure_hook(None)


def _wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_each_host_runs_its_processes_behind_its_agent(
    network: Network, hosts: HostMesh, where: ActorMesh[Where]
) -> None:
    assert hosts.extent == {"hosts": 3}
    values = where.where.call().get(timeout=30)
    assert values.shape.extent == {"hosts": 3, "gpus": 2}
    for index, value in enumerate(values.values()):
        host = network.hosts[index // 2]
        # Each worker listens on its own host's address, and knows its coordinates.
        assert f"|tcp://{host.ip}:" in str(value["address"])
        assert json.loads(str(value["env_coords"])) == {"hosts": index // 2, "gpus": index % 2}


_CAST_KINDS = (headers.CAST, headers.RELAY, headers.TREE_CAST, headers.PLANNED_CAST)


def test_a_cast_costs_the_controller_one_frame_per_host(where: ActorMesh[Where]) -> None:
    runtime = Runtime.get()
    counts: dict[str, int] = {}
    kinds: set[int] = set()
    originals: dict[Connection, Any] = {}
    for conn, link in runtime.agents.items():
        originals[conn] = conn.send

        def counting(parts: Any, _name: str = link.hostname, _send: Any = conn.send) -> None:
            kind = headers.decode(parts[0])[0]
            if kind in _CAST_KINDS:  # (not heartbeats, nor the plan the first call teaches)
                counts[_name] = counts.get(_name, 0) + 1
                kinds.add(kind)
            _send(parts)

        conn.send = counting  # type: ignore[method-assign]
    try:
        assert len(where.where.call().get(timeout=30)) == 6
        where.where.broadcast()
    finally:
        for conn, send in originals.items():
            conn.send = send  # type: ignore[method-assign]
    # Three hosts, two casts (the call and the broadcast): two frames to each agent; with
    # a fan-out below 3 (ACTORMESH_FAN_OUT), two to each of the controller's children.
    per_cast = min(3, runtime.config.fan_out)
    assert sum(counts.values()) == 2 * per_cast and len(runtime.agents) >= 3
    # The whole mesh: by its plan, the frames name no process.
    assert kinds == {headers.PLANNED_CAST}


def test_a_reducing_call_brings_the_controller_one_value_per_host(
    where: ActorMesh[Where], folded: list[int]
) -> None:
    # Each of the three agents folds its two workers' values: three PARTIAL replies.
    seen = folded
    values = where.rank_plus.call(100).get(timeout=30).values()
    assert where.rank_plus.reduce(operator.add)(100).get(timeout=30) == sum(values) == 615
    # (In a tree of agents, ACTORMESH_FAN_OUT below 3: one per child of the controller.)
    assert seen == [headers.PARTIAL] * min(3, Runtime.get().config.fan_out)


def test_stopping_a_process_mesh_costs_the_controller_one_request_per_host(
    hosts: HostMesh,
) -> None:
    runtime = Runtime.get()
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    procs.spawn("doomed", Where).where.call().get(timeout=30)
    sent: list[tuple[Any, ...]] = []
    originals: dict[Connection, Any] = {}
    for conn in runtime.agents:
        originals[conn] = conn.send

        def counting(parts: Any, share: Any = None, _send: Any = conn.send) -> None:
            header = headers.decode(parts[0])
            if header[0] != headers.PING:
                sent.append(header)
            _send(parts) if share is None else _send(parts, share)

        conn.send = counting  # type: ignore[method-assign]
    try:
        procs.stop().get(timeout=60)
    finally:
        for conn, send in originals.items():
            conn.send = send  # type: ignore[method-assign]
    # The actors' STOP_MESH as one cast, then one stop request, per host (per child of
    # the controller in a tree, ACTORMESH_FAN_OUT below 3): no SHUTDOWN, signal or
    # release per process.
    per_cast = min(3, runtime.config.fan_out)
    stops = [h for h in sent if h[0] == headers.HOST]
    assert [headers.read(headers.HostOp, h).op for h in stops] == ["stop_tree"] * per_cast
    assert len(sent) == 2 * per_cast
    assert not any(child.alive() for child in procs._processes.children)


def test_a_slice_of_hosts_spawns_only_there(network: Network, hosts: HostMesh) -> None:
    second = hosts.slice(hosts=1)
    assert second.extent == {}
    with second.spawn_procs(per_host={"gpus": 1}) as procs:
        here = procs.spawn("here", Where)
        (value,) = here.where.call().get(timeout=30).values()
        assert f"|tcp://{network.hosts[1].ip}:" in str(value["address"])


def test_actors_on_different_hosts_call_each_other_directly(
    network: Network, where: ActorMesh[Where]
) -> None:
    far = network.hosts[2].ip
    reached = where.slice(hosts=0, gpus=0).call_other.call_one(where, {"hosts": 2, "gpus": 1})
    assert f"|tcp://{far}:" in str(reached.get(timeout=30)["address"])
    # Directly: the worker on host 2 has a connection from host 0, not only from its agent.
    peers = where.slice(hosts=2, gpus=1).peers.call_one().get(timeout=30)
    assert network.hosts[0].ip in peers


def test_output_of_remote_actors_reaches_the_controller_prefixed(
    where: ActorMesh[Where], capfd: pytest.CaptureFixture[str]
) -> None:
    where.slice(hosts=2, gpus=0).say.call_one("hello from afar").get(timeout=30)
    deadline = time.monotonic() + 10
    text = ""
    while "hello from afar" not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text += capfd.readouterr().out
    assert "[where {hosts=2, gpus=0}] hello from afar" in text


def test_a_remote_rank_is_restarted_in_place(hosts: HostMesh, failures: Failures) -> None:
    with hosts.slice(hosts=slice(0, 2)).spawn_procs(per_host={"gpus": 1}, restart="rank") as procs:
        mesh = procs.spawn("phoenix", Where)
        before = mesh.where.call().get(timeout=30).values()
        with pytest.raises(ActorDiedError, match="restarting the rank"):
            mesh.slice(hosts=1).crash.call_one(3).get(timeout=30)
        # Calls made while it restarts wait for it; the new process has the old address.
        after = mesh.where.call().get(timeout=60).values()
        assert after[1]["address"] == before[1]["address"]
        assert after[1]["pid"] != before[1]["pid"]
        assert mesh.slice(hosts=1).restarts.call_one().get(timeout=30) == 1
    assert failures.seen == []  # a restart within budget is nobody's failure


def test_a_remote_rank_that_exits_is_named_once_with_its_host(
    hosts: HostMesh, failures: Failures
) -> None:
    with hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 1}) as procs:
        mesh = procs.spawn("mortal", Where)
        pid = mesh.where.call_one().get(timeout=30)["pid"]
        with pytest.raises(ActorDiedError) as raised:
            mesh.crash.call_one(3).get(timeout=30)
    # The agent's words for the exit, under the owner's name for the process (once).
    assert re.search(
        rf"process {pid} \(rank 0\) on \S+ \([\d.]+\) exited with code 3", str(raised.value)
    )
    assert str(raised.value).count(f"process {pid}") == 1, str(raised.value)


def test_killing_an_agent_kills_its_ranks_with_an_error_naming_the_host(
    network: Network, failures: Failures
) -> None:
    mesh_hosts, agents = _agents_on(network, 1)
    try:
        procs = mesh_hosts.spawn_procs(per_host={"gpus": 2})
        blocked = procs.spawn("orphaned", Where)
        pids = [v["pid"] for v in blocked.where.call().get(timeout=30).values()]
        pending = blocked.slice(gpus=0).block.call_one()
        agents[0].kill()  # SIGKILL: `ip netns exec` became the agent
        with pytest.raises(ActorDiedError, match="host agent"):
            pending.get(timeout=30)
        _wait_until(lambda: len(failures.seen) >= 1, 10, "the failure report")
        assert failures.seen[0].mesh == "orphaned" and failures.seen[0].kind == "died"
        # Its workers do not outlive it.
        _wait_until(
            lambda: not set(pids) & set(network.processes_in(network.hosts[0])), 10, "no orphans"
        )
        with pytest.raises(ActorDiedError):
            blocked.where.call().get(timeout=10)
    finally:
        mesh_hosts.shutdown().get(timeout=30)


def _controller(network: Network, count: int, env: dict[str, str]) -> subprocess.Popen[str]:
    program = [sys.executable, str(Path(HERE, "multihost_programs.py")), "hosts"]
    with socket.socket() as probe:
        probe.bind((network.controller_ip, 0))
        port = probe.getsockname()[1]
    listen = f"{network.controller_ip}:{port}"
    controller = subprocess.Popen(
        [*program, listen, str(count)],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    for host in network.hosts[:count]:
        network.start_agent(host, listen, env["ACTORMESH_SECRET"])
    return controller


def _line(controller: subprocess.Popen[str], timeout: float) -> str:
    assert controller.stdout is not None
    ready, _, _ = select.select([controller.stdout], [], [], timeout)
    assert ready, f"no line from the controller within {timeout} s"
    return controller.stdout.readline()


def test_every_host_is_empty_soon_after_the_controller_is_killed(network: Network) -> None:
    def running() -> set[int]:
        return {pid for host in network.hosts for pid in network.processes_in(host)}

    others = running()  # the module's own host mesh lives there too
    controller = _controller(network, 3, {"ACTORMESH_SECRET": os.urandom(16).hex()})
    try:
        assert _line(controller, 90).startswith("READY")
        started = running() - others
        # An agent, two workers and (where workers are forked) the fork server's template
        # on each host.
        assert len(started) == 3 * (3 + forks_available())
        controller.kill()
        killed = time.monotonic()
        _wait_until(lambda: not running() & started, 10, "every namespace to empty")
        assert time.monotonic() - killed < 2.5
    finally:
        controller.kill()
        controller.wait(10)


def test_a_cut_link_is_detected_within_the_heartbeat_timeout(network: Network) -> None:
    env = {
        "ACTORMESH_SECRET": os.urandom(16).hex(),
        "ACTORMESH_HEARTBEAT_TIMEOUT": "2",
        "ACTORMESH_HEARTBEAT_INTERVAL": "0.5",
    }
    host = network.hosts[0]
    others = set(network.processes_in(host))  # the module's own agent is there too
    controller = _controller(network, 1, env)
    try:
        assert _line(controller, 90).startswith("READY")
        ip("-n", host.netns, "link", "set", "eth0", "down")
        assert controller.stdin is not None
        controller.stdin.write("go\n")
        controller.stdin.flush()
        outcome = json.loads(_line(controller, 30))
        assert outcome["error"] == "ActorDiedError"
        assert "host agent" in outcome["message"]
        assert outcome["seconds"] < 2 + 0.5 + 2  # the timeout, a probe interval, slack
    finally:
        ip("-n", host.netns, "link", "set", "eth0", "up")
        controller.kill()
        controller.wait(10)
        for pid in set(network.processes_in(host)) - others:  # cut off: they cannot hear
            os.kill(pid, signal.SIGKILL)


def test_a_mesh_on_the_controllers_host_is_called_from_other_hosts(
    network: Network, hosts: HostMesh, where: ActorMesh[Where]
) -> None:
    # The controller listens on the bridge (for its agents), so its own workers listen
    # there too: their addresses are dual, Unix here and TCP for everyone else.
    with actormesh.this_host().spawn_procs(per_host={"gpus": 1}) as procs:
        local = procs.spawn("local", Where)
        (address,) = local._ref.paths
        assert f"|tcp://{network.controller_ip}:" in address
        reached = where.slice(hosts=1, gpus=0).call_other.call_one(local, {"gpus": 0})
        assert reached.get(timeout=30)["pid"] == local.where.call_one().get(timeout=30)["pid"]
        # The controller itself still talks to it over its Unix socket.
        assert route(address) == address.split("|")[0]


def test_a_process_group_and_weight_sync_span_hosts(hosts: HostMesh) -> None:
    from multihost_actors import TorchPeer

    from actormesh.torch import setup_process_group, sync_weights

    with (
        hosts.slice(hosts=slice(0, 2)).spawn_procs(per_host={"gpus": 1}) as train_procs,
        hosts.slice(hosts=2).spawn_procs(per_host={"gpus": 2}) as gen_procs,
    ):
        trainers = train_procs.spawn("trainers", TorchPeer, 0)
        generators = gen_procs.spawn("generators", TorchPeer, 1)
        setup_process_group(trainers).get(timeout=120)
        sums = [trainers.slice(hosts=h).all_reduce.call_one(h + 1.5) for h in (0, 1)]
        assert [s.get(timeout=60) for s in sums] == [4.0, 4.0]  # 1.5 + 2.5, on both hosts
        trained = trainers.slice(hosts=0).weight_sum.call_one().get(timeout=30)
        assert generators.weight_sum.call().get(timeout=30).values() != [trained, trained]
        report = sync_weights(trainers, generators, version=1).get(timeout=120)
        assert report.version == 1
        assert generators.weight_sum.call().get(timeout=30).values() == [trained, trained]


def test_rdma_buffers_are_read_and_written_across_hosts(procs: ProcMesh) -> None:
    import torch
    from multihost_actors import BufferOwner

    numel = 1 << 18  # 1 MiB of float32
    owners = procs.slice(gpus=0).spawn("buffer_owners", BufferOwner, numel)
    first, second = owners.slice(hosts=0), owners.slice(hosts=1)
    buffer = first.handle.call_one().get(timeout=30)
    # Another host: the bytes come from the owner's service actor over TCP.
    read = second.read.call_one(buffer, numel).get(timeout=60)
    assert torch.equal(read, first.weights_now.call_one().get(timeout=30))
    # The controller is on a host of its own (the root namespace) too.
    local = torch.zeros(numel)
    buffer.read_into(local.view(torch.uint8).flatten()).get(timeout=60)
    assert torch.equal(local, read)
    second.write.call_one(buffer, 3.0, numel).get(timeout=60)
    assert torch.equal(first.weights_now.call_one().get(timeout=30), torch.full((numel,), 3.0))
    buffer.drop().get(timeout=30)
    with pytest.raises(KeyError, match="dropped"):
        second.read.call_one(buffer, numel).get(timeout=60)


def test_ports_carry_messages_across_hosts_in_order(procs: ProcMesh) -> None:
    from port_actors import Relay

    from actormesh.actor import Channel

    relays = procs.slice(gpus=0).spawn("relays", Relay)
    port, receiver = Channel.open()
    # Each actor, on its own host, sends 50 messages to a receiver in the controller.
    relays.send_many.call(port, 50).get(timeout=60)
    got = [receiver.recv().get(timeout=30) for _ in range(150)]
    for rank in (0, 1, 2):
        assert [i for r, i, _ in got if r == rank] == list(range(50))  # in order per sender
    # An actor's own channel, fed by an actor on another host.
    their_port = relays.slice(hosts=2).my_port.call_one().get(timeout=30)
    relays.slice(hosts=0).send_many.call_one(their_port, 20).get(timeout=30)
    received = relays.slice(hosts=2).receive.call_one(20).get(timeout=30)
    assert [i for _, i, _ in received] == list(range(20))
