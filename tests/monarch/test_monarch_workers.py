"""Workers a controller attaches to (``run_worker_loop_forever``,
``start_worker_loop_forever``, ``attach_to_workers``), and ``shutdown_context``, each in a
fresh controller process (``monarch_programs.py``), as in Monarch 0.7."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from actormesh.testing import wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_support import listening_ports
else:
    from monarch_support import listening_ports

HERE = Path(__file__).resolve().parent


def _port_of(worker: subprocess.Popen[Any]) -> int:
    """The port a worker started on port 0 picked (it or its agent process listens there).

    Picking a free port here and handing it over would race: another process may take it
    between its probe's close and the worker's bind.
    """
    found: list[int] = []

    def listening() -> bool:
        assert worker.poll() is None, f"the worker exited with {worker.returncode}"
        found[:] = listening_ports(worker.pid)
        return bool(found)

    wait_until(listening, 60, f"worker {worker.pid} to listen")
    assert len(found) == 1, found
    return found[0]


def _command(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "monarch_programs", name, *args]


def _program(name: str, *args: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        _command(name, *args), capture_output=True, text=True, timeout=timeout, env=env, cwd=HERE
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def job_env() -> dict[str, str]:
    """The environment of a job's processes: actormesh's workers and controller prove a
    shared secret to each other (Monarch's ``ca``/``private_key`` TLS settings)."""
    return {**os.environ, "ACTORMESH_SECRET": secrets.token_hex(16)}


@pytest.mark.timeout(120)
def test_a_controller_attaches_to_workers_and_shuts_them_down(job_env: dict[str, str]) -> None:
    workers = [
        subprocess.Popen(
            _command("serve_forever", "0"),
            env=job_env,
            cwd=HERE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            _command("serve", "0"),
            env=job_env,
            cwd=HERE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    try:
        first, second = (_port_of(worker) for worker in workers)
        result = _program("attach", str(first), str(second), env=job_env, timeout=100)
        # A worker's loop ends, and its process with it, when its host mesh is shut down.
        assert [worker.wait(timeout=30) for worker in workers] == [0, 0]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)
    assert result["extent"] == {"hosts": 2}
    assert result["initialized"] is True
    assert result["one_host"] == {}
    assert result["kept_host"] == {"hosts": 1}
    assert "overlap" in result["overlap"]
    assert result["proc_extent"] == {"hosts": 2, "gpus": 1}
    assert result["ranks"] == [{"hosts": 0, "gpus": 0}, {"hosts": 1, "gpus": 0}]
    assert len(set(result["pids"])) == 2
    # Inside an actor, its host is one host without dimensions.
    assert result["where"] == [{"host": {}, "proc": {}}] * 2
    assert result["sliced_host_proc_extent"] == {"gpus": 1}
    assert result["sliced_host_tag"] == "one"


@pytest.mark.timeout(120)
def test_shutdown_context_ends_every_process_of_the_controller(job_env: dict[str, str]) -> None:
    result = _program("shutdown", env=job_env, timeout=100)
    assert result == {"first": None, "gone": [True, True], "second": None}


@pytest.mark.timeout(120)
def test_run_worker_loop_until_shutdown_returns_once_its_host_mesh_ends(
    job_env: dict[str, str],
) -> None:
    worker = subprocess.Popen(
        _command("serve_until_shutdown", "0"),
        env=job_env,
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        result = _program("attach_one", str(_port_of(worker)), env=job_env, timeout=100)
        output, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
    assert result == {"tag": ["remote"]}
    assert worker.returncode == 0
    assert json.loads(output.strip().splitlines()[-1]) == {"returned": True}
