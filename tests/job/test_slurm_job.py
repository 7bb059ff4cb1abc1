"""``SlurmJob`` on a real Slurm: Debian's slurmctld and three slurmd nodes, each in a
network namespace of its own, started by ``scripts/slurm-cluster`` (see its header).

A job of three nodes gets its host meshes, runs calls across them (each actor reports its
host's network namespace and IP); a controller without the job's secret is refused; a
re-run of the controller, a new process, re-attaches to the same allocation (the same
Slurm job id, no new ``sbatch``, the same worker loops), and once the allocation ended
behind its back (``scancel``) the next run allocates anew;
``kill()`` leaves nothing in Slurm's queue and no process but slurmd in any namespace.
Skipped, with the reason, where Slurm is not installed (``scripts/slurm-cluster start``
installs it) or namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from actormesh.testing import wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.job
    from tests.job.job_support import HERE, controller_error, run_controller
else:
    from job_support import HERE, controller_error, run_controller

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-cluster"
NODES = 3
NODE_IPS = [f"10.78.0.1{k}" for k in range(1, NODES + 1)]
SLURM_TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "munged", "mungekey")


def _cluster_env(directory: Path) -> dict[str, str]:
    return {**os.environ, "AMSLURM_DIR": str(directory)}


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running 3-node cluster; SLURM_CONF points at it while the module runs."""
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"Slurm is not installed (no {', '.join(missing)}): scripts/slurm-cluster start "
            "installs Debian's slurmctld, slurmd, slurm-client and munge"
        )
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("the Slurm cluster needs root, ip (iproute2) and nsenter for its nodes")
    directory = Path("/tmp/amslurm-test")
    env = _cluster_env(directory)
    started = subprocess.run(
        [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=180
    )
    assert started.returncode == 0, started.stderr[-3000:]
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(directory / "slurm.conf")
    try:
        yield directory
    finally:
        if previous is None:
            del os.environ["SLURM_CONF"]
        else:
            os.environ["SLURM_CONF"] = previous
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def _queue() -> list[str]:
    done = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:-1]


def _processes_on_nodes() -> list[str]:
    """Every process in the nodes' namespaces except the slurmd daemons."""
    found = []
    for k in range(1, NODES + 1):
        pids = subprocess.run(
            ["ip", "netns", "pids", f"amslurm-{k}"], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue  # gone meanwhile
            if not command.startswith(b"slurmd "):
                found.append(f"node{k}: {pid} {command.decode(errors='replace')[:120]}")
    return found


def _where(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for mesh in ("trainers", "eval") for w in result["meshes"][mesh]]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_slurm_job_runs_reattaches_and_is_killed_to_nothing(slurm: Path, tmp_path: Path) -> None:
    cache = tmp_path / ".monarch" / "job_state.pkl"
    # The job's secret: sbatch hands the submitting environment to the worker loops, so
    # every controller after the first must prove it (the loops listen on TCP).
    secret = {**os.environ, "ACTORMESH_SECRET": secrets.token_hex(16)}
    args = {
        "kind": "slurm",
        "meshes": {"trainers": 2, "eval": 1},
        "port": 29555,
        "log_dir": str(tmp_path),
        "cache": str(cache),
    }
    try:
        first = run_controller("controller", args, env=secret)
        job_id = first["slurm_job_id"]
        assert _queue() == [f"{job_id} RUNNING"]
        where = _where(first)
        # One host per node: three namespaces, each actor at its node's NodeAddr.
        assert len({w["netns"] for w in where}) == NODES
        assert sorted(ip for w in where for ip in w["ips"]) == NODE_IPS
        assert [w["rank"] for w in first["meshes"]["trainers"]] == [{"hosts": 0}, {"hosts": 1}]

        no_secret = {k: v for k, v in secret.items() if k != "ACTORMESH_SECRET"}
        refused = controller_error("controller", args, env=no_secret)
        assert "AuthenticationError" in refused and "ACTORMESH_SECRET" in refused
        second = run_controller("controller", args, env=secret)
        # The same allocation: no new sbatch, the very same worker loops on the nodes.
        assert second["slurm_job_id"] == job_id
        assert second["apply_id"] == first["apply_id"]
        assert _queue() == [f"{job_id} RUNNING"]
        assert [w["loop"] for w in _where(second)] == [w["loop"] for w in where]
        # The allocation ends behind the cache's back: the next run allocates anew.
        subprocess.run(["scancel", job_id], check=True)
        third = run_controller("controller", args, env=secret)
        assert third["slurm_job_id"] != job_id
        assert third["apply_id"] != first["apply_id"]
        assert _queue() == [f"{third['slurm_job_id']} RUNNING"]
        print(
            f"\nSlurm: first answer from nothing (sbatch) {first['first_answer_s']:.2f} s; "
            f"re-attach: first answer {second['first_answer_s']:.2f} s "
            f"(attached after {second['attach_s']:.2f} s)"
        )
    finally:
        if cache.exists():
            assert run_controller("kill", {"cache": str(cache)}, env=secret) == {"active": False}
    assert _queue() == []
    assert _processes_on_nodes() == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_leased_slurm_hosts_outlive_a_killed_controller_and_a_rerun_gets_them_back(
    slurm: Path, tmp_path: Path
) -> None:
    cache = tmp_path / ".monarch" / "job_state.pkl"
    secret = {**os.environ, "ACTORMESH_SECRET": secrets.token_hex(16)}
    lease = f"slurm-{os.getpid()}"
    args = {
        "kind": "slurm",
        "meshes": {"trainers": NODES},
        "port": 29556,
        "log_dir": str(tmp_path),
        "cache": str(cache),
        "lease": lease,
        "keep_alive": 20,
    }
    try:
        died = subprocess.run(
            [sys.executable, "-m", "job_programs", "leased", json.dumps(args)],
            capture_output=True, text=True, timeout=300, cwd=HERE, env=secret,
        )  # fmt: skip
        assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]
        assert json.loads(died.stdout.splitlines()[-1]) == {"counts": [6] * NODES}
        job_id = _queue()[0].split()[0]
        again = run_controller("reattach", args, env=secret)
        # The same allocation and actors, on every node, with their counts.
        assert _queue() == [f"{job_id} RUNNING"]
        assert again["same_hosts"] is True
        assert again["counts"] == [6] * NODES
        assert "AttachRefusedError" in again["second"][0], again["second"]
        assert "AuthenticationError" in again["wrong_secret"][0], again["wrong_secret"]
        print(
            f"\nleased SlurmJob: re-run's state() after {again['attach_s']:.2f} s, first "
            f"answer of the attached actors {again['first_answer_s']:.2f} s (from its start)"
        )
        # Nobody attached for the lease: its agents and workers end on every node; the
        # worker loops stay, and a plain re-run is served by them at once.
        leased = {f"{pid}" for w in again["where"] for pid in (w["pid"], w["agent"])}

        def lease_over() -> bool:
            return not any(line.split()[1] in leased for line in _processes_on_nodes())

        wait_until(lambda: lease_over(), 90, "the lease to end on every node")
        fresh = run_controller("controller", args, env=secret)
        assert len(fresh["meshes"]["trainers"]) == NODES
    finally:
        if cache.exists():
            assert run_controller("kill", {"cache": str(cache)}, env=secret) == {"active": False}
    assert _queue() == []
    assert _processes_on_nodes() == []
