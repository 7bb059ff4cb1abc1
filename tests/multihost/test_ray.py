"""RayAllocator on a real Ray cluster, started by the tests (2 CPUs, no dashboard)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from multihost_actors import Where

from actormesh import ActorDiedError, proc_mesh
from actormesh.allocators import RayAllocator

ray = pytest.importorskip("ray", reason="the Ray tests need ray (a dev dependency)")

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A local Ray cluster for this module; shut down afterwards."""
    # address="local": a fresh instance even if `ray start` left a cluster on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after ``timeout`` seconds (waits on pidfds, no polling)."""
    import select
    import time

    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        pending = set(fds)
        while pending and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                pending.discard(fd)
                poller.unregister(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return [pid for pid in pids if _alive(pid)]


def _placement_groups(ray: Any) -> dict[str, str]:
    from ray.util import placement_group_table

    return {pg_id: info["state"] for pg_id, info in placement_group_table().items()}


def test_a_mesh_on_ray_spawns_calls_and_stops_without_leftovers(cluster: Any) -> None:
    groups_before = _placement_groups(cluster)
    procs = proc_mesh(gpus=2, allocator=RayAllocator(strategy="SPREAD")).get(timeout=120)
    try:
        where = procs.spawn("where", Where)
        values = list(where.where.call().get(timeout=30).values())
        pids = [int(v["pid"]) for v in values]
        assert len(set(pids)) == 2 and os.getpid() not in pids
        # Started by Ray actors, not by us; they joined over TCP (loopback: one node).
        assert all(os.getppid() != pid for pid in pids)
        assert all(str(v["address"]).startswith("tcp://127.0.0.1:") for v in values)
        assert [v["env_rank"] for v in values] == ["0", "1"]
        # Actor to actor, process to process.
        other = procs.spawn("other", Where)
        reached = where.slice(gpus=0).call_other.call_one(other, {"gpus": 1}).get(timeout=30)
        assert reached["pid"] == pids[1]
        new_groups = set(_placement_groups(cluster)) - set(groups_before)
        assert len(new_groups) == 1
    finally:
        procs.stop().get(timeout=60)
    assert _wait_gone(pids, 15) == []
    assert _placement_groups(cluster)[new_groups.pop()] == "REMOVED"


def test_a_ray_worker_that_dies_fails_its_calls_with_actor_died_error(cluster: Any) -> None:
    procs = proc_mesh(2, allocator=RayAllocator()).get(timeout=120)
    try:
        where = procs.spawn("where", Where)
        pids = [int(v["pid"]) for v in where.where.call().get(timeout=30).values()]
        pending = where[1].block.call_one()
        os.kill(pids[1], 9)
        with pytest.raises(ActorDiedError, match="closed its connection"):
            pending.get(timeout=30)
        # The other rank lives on.
        assert where[0].where.call_one().get(timeout=30)["pid"] == pids[0]
    finally:
        procs.stop().get(timeout=60)
    assert _wait_gone(pids, 15) == []


def test_ray_allocator_refuses_settings_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="strategy"):
        RayAllocator(strategy="RANDOM")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="some resource"):
        RayAllocator(cpus_per_process=0)
    with pytest.raises(ValueError, match="restart"):
        proc_mesh(2, allocator=RayAllocator(), restart="rank")
