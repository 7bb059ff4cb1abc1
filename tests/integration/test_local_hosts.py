"""``host_mesh(n)`` on this host: ``n`` host agents, children of the controller, each
starting and watching its own workers and relaying casts to them, as agents on other
hosts do (those are tested across network namespaces in ``tests/multihost``)."""

from __future__ import annotations

import operator
import os
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from integration_actors import DataPlane
from integration_support import kill_controller_and_wait

from actormesh import Actor, HostMesh, endpoint, host_mesh
from actormesh._core import headers
from actormesh._hosts import Runtime
from actormesh.testing import shm_segments

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
                kind = headers.decode(parts[0])[0]
                if kind in (headers.CAST, headers.RELAY, headers.PLANNED_CAST):
                    counts.append(kind)
                _send(parts)

            conn.send = counting
        try:
            assert len(where.where.call().get(timeout=30)) == 4
        finally:
            for conn, send in originals.items():
                conn.send = send
        # One frame per host: by the mesh's plan, or, once this thread's calls have a
        # reply route to processes of this host (after its first few calls), a CAST
        # naming each process, so that their replies can come on that route.
        assert len(counts) == 2 and len(set(counts)) == 1
        assert counts[0] in (headers.PLANNED_CAST, headers.CAST)


def test_killing_the_controller_ends_its_local_agents_and_their_workers() -> None:
    program = """
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
    # Two agents and four workers.
    kill_controller_and_wait(program, 6, 10, "the agents and workers to exit")


def test_host_mesh_refuses_a_bad_count() -> None:
    with pytest.raises(ValueError, match="positive int"):
        host_mesh(0)


def test_spawn_procs_refuses_per_host_that_is_not_a_mapping(hosts: HostMesh) -> None:
    with pytest.raises(TypeError, match=r"per_host must map dimension names to sizes"):
        hosts.spawn_procs(per_host=4)  # type: ignore[arg-type]


def test_an_agent_gives_its_workers_one_shared_copy_of_a_large_argument(hosts: HostMesh) -> None:
    with hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 3}) as procs:
        plane = procs.spawn("plane", DataPlane)
        pids = set(procs.spawn("where_plane", Where).where.call().get(timeout=30).values())
        before = {pid: set(shm_segments(pid)) for pid, _ in pids}
        tensor = torch.randint(0, 255, (8 << 20,), dtype=torch.uint8)
        plane.hold.call(tensor).get(timeout=60)  # each actor keeps its view of it
        new = [set(shm_segments(pid)) - before[pid] for pid, _ in pids]
        # The agent filled one segment and lent it to its three workers.
        assert len(new) == 3 and all(len(segments) == 1 for segments in new)
        assert len(set.union(*new)) == 1
        assert (
            plane.kept_checksum.call().get(timeout=60).values()
            == [zlib.crc32(tensor.numpy().tobytes())] * 3
        )


def test_a_large_argument_for_several_hosts_goes_down_their_agents_once(
    hosts: HostMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime.get()
    monkeypatch.setattr(runtime, "config", runtime.config.replace(bulk_threshold=1 << 20))
    with hosts.spawn_procs(per_host={"gpus": 2}) as procs:
        plane = procs.spawn("bulk_plane", DataPlane)
        pids = [pid for pid, _ in procs.spawn("where_bulk", Where).where.call().get(30).values()]
        before = {pid: set(shm_segments(pid)) for pid in pids}
        sent: list[int] = []
        for conn in runtime.agents:

            def counting(parts: Any, share: Any = None, _send: Any = conn.send) -> None:
                if headers.decode(parts[0])[0] == headers.BULK_DATA:
                    sent.append(memoryview(parts[1]).nbytes)
                _send(parts, share)

            monkeypatch.setattr(conn, "send", counting)
        tensor = torch.randint(0, 255, (8 << 20,), dtype=torch.uint8)
        plane.hold.call(tensor).get(timeout=60)
        assert sum(sent) == 8 << 20  # to the first agent only; it fed the second
        new = [set(shm_segments(pid)) - before[pid] for pid in pids]
        # Each agent wrote the chunks into one segment and lent it to its two workers.
        assert all(len(segments) == 1 for segments in new)
        assert new[0] == new[1] != new[2] == new[3]
        crc = zlib.crc32(tensor.numpy().tobytes())
        assert plane.kept_checksum.call().get(timeout=60).values() == [crc] * 4
        assert plane.checksum.reduce(operator.add)(tensor).get(timeout=60) == 4 * crc
    assert runtime.bulk.transfers == {}
