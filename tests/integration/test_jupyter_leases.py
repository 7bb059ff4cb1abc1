"""A notebook's leased job outlives a kernel restart: the new kernel attaches by name.

The hosts are ``host_mesh(2)``'s agents on this host (``LocalAllocator``): real agent
processes, children of the kernel, which the restart kills with its whole process group
(SIGKILL); the agents, in sessions of their own, run on under their lease.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from integration_support import run_cell

from actormesh.testing import live, wait_until

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def notebook(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    env = {**os.environ, "ACTORMESH_JOBS_DIR": str(tmp_path / "jobs")}
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3", env=env)
    try:
        yield manager, client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_restarted_kernel_attaches_to_its_job_and_finds_its_actors_state(
    notebook: tuple[Any, Any],
) -> None:
    manager, client = notebook
    out, errors = run_cell(
        client,
        """
        import json, os
        import actormesh
        from actormesh import Actor, endpoint

        class Counter(Actor):  # defined in a cell: the new kernel will not have it
            def __init__(self):
                self.count = 0

            @endpoint
            def incr(self):
                self.count += 1
                return self.count

            @endpoint
            def pid(self):
                return os.getpid()

        hosts = actormesh.host_mesh(2, name="notebook-job", keep_alive=120).get(timeout=90)
        procs = hosts.spawn_procs(per_host={"gpus": 2}, name="workers")
        counters = procs.spawn("counters", Counter)
        for _ in range(3):
            counters.incr.call().get(timeout=30)
        try:
            procs.spawn("counters", Counter)
        except ValueError as error:
            print("REFUSED", error)
        own = actormesh.attach("notebook-job")  # this kernel runs it: its own handles
        print("OWN", sorted(own.names()), own["counters"] is counters)
        print(json.dumps(counters.pid.call().get(timeout=30).values()))
        """,
        timeout=120,
    )
    assert errors == [], errors
    assert "REFUSED job 'notebook-job' already has a live actor mesh named 'counters'" in out
    assert "OWN ['counters', 'notebook-job', 'workers'] True" in out
    pids = json.loads(out.strip().splitlines()[-1])
    manager.restart_kernel(now=True)  # SIGKILL to the kernel's process group
    client.wait_for_ready(timeout=60)
    assert live(pids) == pids  # the lease holds them
    out, errors = run_cell(
        client,
        """
        import json
        import actormesh
        job = actormesh.attach("notebook-job")
        counters = job["counters"]
        print(json.dumps({
            "names": sorted(job.names()),
            "pids": counters.pid.call().get(timeout=30).values(),
            "counts": counters.incr.call().get(timeout=30).values(),
        }))
        """,
        timeout=120,
    )
    assert errors == [], errors
    found = json.loads(out.strip().splitlines()[-1])
    assert found == {
        "names": ["counters", "notebook-job", "workers"],
        "pids": pids,
        "counts": [4, 4, 4, 4],
    }
    # Detaching lets the job run on without this kernel, which may come back.
    out, errors = run_cell(
        client,
        """
        job.detach()
        try:
            counters.incr.call().get(timeout=30)
        except actormesh.MeshStoppedError as error:
            print("DETACHED", error)
        job = actormesh.attach("notebook-job")
        print("BACK", job["counters"].incr.call().get(timeout=30).values())
        job.kill()
        """,
        timeout=120,
    )
    assert errors == [], errors
    assert "DETACHED" in out and "detached from job 'notebook-job'" in out
    assert "BACK [5, 5, 5, 5]" in out
    wait_until(lambda: not live(pids), 30, "the job's workers to end")
