"""``host_mesh(n)`` on this host: ``n`` host agents, children of the controller, each
starting and watching its own workers and relaying casts to them, as agents on other
hosts do (those are tested across network namespaces in ``tests/multihost``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from actormesh import Actor, HostMesh, endpoint, host_mesh
from actormesh._core._envelope import CAST, RELAY, decode_header
from actormesh._hosts import Runtime
from actormesh.testing import live, wait_until

pytestmark = pytest.mark.timeout(120)


class Where(Actor):
    @endpoint
    def where(self) -> tuple[int, int]:
        print("hello from a worker of a local host", flush=True)
        return os.getpid(), os.getppid()


@pytest.fixture(scope="module")
def hosts() -> Iterator[HostMesh]:
    mesh = host_mesh(2).get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.shutdown().get(timeout=30)


def test_each_local_host_is_an_agent_that_parents_its_workers(hosts: HostMesh) -> None:
    assert hosts.extent == {"hosts": 2}
    with hosts.spawn_procs(per_host={"gpus": 2}) as procs:
        where = procs.spawn("where", Where).where.call().get(timeout=30)
        assert where.extent == {"hosts": 2, "gpus": 2}
        parents = [parent for _, parent in where.values()]
        assert parents[0] == parents[1] != parents[2] == parents[3]
        assert os.getpid() not in parents  # the agents started them, not the controller
        agents = {link.process.pid for link in Runtime.get().agents.values()}
        assert set(parents) <= agents


def test_a_cast_costs_one_frame_per_local_host(hosts: HostMesh) -> None:
    runtime = Runtime.get()
    with hosts.spawn_procs(per_host={"gpus": 2}) as procs:
        where = procs.spawn("where_frames", Where)
        where.where.call().get(timeout=30)
        counts: list[int] = []
        originals: dict[Any, Any] = {}
        for conn in runtime.agents:
            originals[conn] = conn.send

            def counting(parts: Any, _send: Any = conn.send) -> None:
                if decode_header(parts[0])[0] in (CAST, RELAY):
                    counts.append(1)
                _send(parts)

            conn.send = counting
        try:
            assert len(where.where.call().get(timeout=30)) == 4
        finally:
            for conn, send in originals.items():
                conn.send = send
        assert len(counts) == 2


def test_killing_the_controller_ends_its_local_agents_and_their_workers() -> None:
    program = textwrap.dedent(
        """
        import os, sys
        from actormesh import Actor, endpoint, host_mesh

        class Where(Actor):
            @endpoint
            def where(self):
                return os.getpid(), os.getppid()

        hosts = host_mesh(2).get(timeout=60)
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        pids = [p for pair in procs.spawn("w", Where).where.call().get(timeout=30).values()
                for p in pair]
        print(" ".join(map(str, sorted(set(pids)))), flush=True)
        sys.stdin.read()
        """
    )
    controller = subprocess.Popen(
        [sys.executable, "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert controller.stdout is not None
        pids = [int(p) for p in controller.stdout.readline().split()]
        assert len(pids) == 6  # two agents, four workers
        assert live(pids) == pids
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
        wait_until(lambda: not live(pids), 10, "the agents and workers to exit")
    finally:
        controller.kill()
        controller.wait(10)


def test_host_mesh_refuses_a_bad_count() -> None:
    with pytest.raises(ValueError, match="positive int"):
        host_mesh(0)
