"""RayAllocator on a Ray cluster of two nodes, started by the test with ``ray start``.

Both nodes run on this machine (``--node-ip-address=127.0.0.1``), each with a resource of
its own, so placement is Ray's real multi-node placement: host agents spread one per node,
and code inside the actors that uses Ray joins this cluster rather than a private one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_actors import RayUser, Where

from actormesh import host_mesh, proc_mesh
from actormesh.allocators import RayAllocator

ray = pytest.importorskip("ray", reason="the Ray tests need ray (a dev dependency)")

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(240)]

RAY = str(Path(sys.executable).with_name("ray"))


def _cluster_processes(temp_dir: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if temp_dir.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[str]:
    """A head node and a second node, joined; the cluster's address. Torn down after."""
    temp_dir = f"/tmp/rn{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}  # two nodes on one IP
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=2", "--disable-usage-stats"]
    try:
        # Port 0: the head picks a free port itself (a port probed here and closed could
        # be taken before it binds it) and writes its address into its temp dir.
        subprocess.run(
            [RAY, "start", "--head", "--port=0", f"--temp-dir={temp_dir}",
             "--include-dashboard=false", "--resources={\"node_a\": 4}", *common],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        written = (Path(temp_dir) / "ray_current_cluster").read_text().strip()
        address = f"127.0.0.1:{written.rsplit(':', 1)[1]}"  # it listens on every interface
        subprocess.run(
            [RAY, "start", f"--address={address}", "--resources={\"node_b\": 4}", *common],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        ray.init(address=address, log_to_driver=False)
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        assert len(nodes) == 2, nodes
        yield address
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        for pid in _cluster_processes(temp_dir):  # this cluster's, and nobody else's
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_host_agents_land_one_per_node(two_nodes: str) -> None:
    hosts = host_mesh(2, allocator=RayAllocator(cpus_per_process=1)).get(timeout=120)
    try:
        names = [link.hostname for link in hosts._hosts.links if link is not None]
        assert len(set(names)) == 2 and all(name.startswith("Ray node") for name in names)
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        where = procs.spawn("where", Where)
        # Both ranks of each host run under that host's agent: on its node.
        by_host = {}
        for child in procs._processes.children:
            by_host.setdefault(child.host, []).append(child.rank)  # type: ignore[attr-defined]
        assert sorted(by_host.values()) == [[0, 1], [2, 3]] and set(by_host) == set(names)
        assert len(where.where.call().get(timeout=60)) == 4
        # Code that uses Ray inside them joins this cluster, not a private one.
        users = procs.spawn("users", RayUser)
        seen = users.cluster.call().get(timeout=120).values()
        assert {value["gcs"] for value in seen} == {ray.get_runtime_context().gcs_address}
        assert {value["nodes"] for value in seen} == {2}
    finally:
        hosts.shutdown().get(timeout=60)
    # The agents' Ray actors and placement group are gone with them.
    from ray.util import placement_group_table

    assert all(info["state"] == "REMOVED" for info in placement_group_table().values())


def test_processes_spread_over_both_nodes(two_nodes: str) -> None:
    allocator = RayAllocator(strategy="STRICT_SPREAD")
    procs = proc_mesh(hosts=2, gpus=1, allocator=allocator).get(timeout=120)
    try:
        where = procs.spawn("where", Where)
        assert len(where.where.call().get(timeout=60)) == 2
        hosts = {child.host for child in procs._processes.children}  # type: ignore[attr-defined]
        assert len(hosts) == 2
    finally:
        procs.stop().get(timeout=60)
