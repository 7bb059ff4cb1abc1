"""``ProcessJob``: a Monarch program gets the same results on Monarch and on actormesh; a
re-run re-attaches to the same hosts through the cache; ``kill()`` leaves no process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compat.run import Program, find_monarch_python, run_on_actormesh, run_on_peer

from actormesh.job import ProcessJob, job_load
from actormesh.job._sessions import live_in_sessions
from actormesh.testing import wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.job
    from tests.job.job_support import HERE, run_controller
else:
    from job_support import HERE, run_controller

REPO = Path(__file__).resolve().parents[2]
PROGRAM = Program(REPO / "compat" / "monarch" / "job_process.py", "monarch")


def _monarch_python() -> str:
    python, why = find_monarch_python(None)
    if python is None:
        default = REPO / ".venv-monarch" / "bin" / "python"  # scripts/monarch-suite's
        if not default.exists():
            pytest.skip(f"the Monarch control needs torchmonarch 0.7: {why}")
        python = str(default)
    return python


def _last_json(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_monarch_job_program_gives_the_same_results_on_monarch_and_actormesh() -> None:
    monarch = run_on_peer(PROGRAM, python=_monarch_python(), timeout=180)
    assert monarch.ok, monarch.output[-3000:]
    ours = run_on_actormesh(PROGRAM, timeout=180)
    assert ours.ok, ours.output[-3000:]
    assert not ours.leftovers, ours.leftovers
    assert _last_json(ours.output) == _last_json(monarch.output)
    assert _last_json(ours.output)["reattached"] is True


def _loop_pids(cache: Path) -> list[int]:
    job = job_load(str(cache))
    assert isinstance(job, ProcessJob)
    return sorted(state.pid for state in job._host_to_pid.values())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_rerun_reattaches_to_the_same_hosts_and_kill_leaves_no_process(tmp_path: Path) -> None:
    cache = tmp_path / ".monarch" / "job_state.pkl"
    args = {"kind": "process", "meshes": {"trainers": 2, "eval": 1}, "cache": str(cache)}
    try:
        first = run_controller("controller", args)
        loops = _loop_pids(cache)
        assert len(loops) == 3
        assert live_in_sessions(loops)  # the hosts outlived their first controller
        second = run_controller("controller", args)
        # The same allocation, the same worker-loop processes: the actors of the second
        # controller run under the very loops the first one started.
        assert second["apply_id"] == first["apply_id"]
        assert _loop_pids(cache) == loops
        for run in (first, second):
            where = [w for mesh in run["meshes"].values() for w in mesh]
            assert sorted(w["loop"] for w in where) == loops
            assert [w["rank"] for w in run["meshes"]["trainers"]] == [{"hosts": 0}, {"hosts": 1}]
    finally:
        if cache.exists():
            assert run_controller("kill", {"cache": str(cache)}) == {"active": False}
    assert live_in_sessions(loops) == []  # every loop, agent and worker is gone


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cached_job_that_cannot_run_the_new_spec_is_ended_and_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "job.pkl"
    old = ProcessJob({"hosts": 1})
    new = ProcessJob({"hosts": 2})
    try:
        old.apply()
        old.dump(str(cache))
        old_loops = sorted(s.pid for s in old._host_to_pid.values())
        state = new.state(cached_path=str(cache))
        assert state.hosts.size() == 2
        assert live_in_sessions(old_loops) == []  # the stale allocation was ended
        assert new.apply_id != old.apply_id
        assert job_load(str(cache)).apply_id == new.apply_id  # and the cache replaced
    finally:
        new.kill()
        old._kill()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cached_job_that_lost_a_host_is_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "job.pkl"
    old = ProcessJob({"hosts": 2})
    new = ProcessJob({"hosts": 2})
    try:
        old.apply()
        old.dump(str(cache))
        loops = sorted(s.pid for s in old._host_to_pid.values())
        os.kill(loops[0], signal.SIGKILL)  # a host dies while no controller is attached
        wait_until(lambda: loops[0] not in live_in_sessions(loops), 30, "the host to die")
        assert new.state(cached_path=str(cache)).hosts.size() == 2
        assert new.apply_id != old.apply_id  # a new allocation, not the broken one
        assert live_in_sessions(loops) == []  # whose other host was ended
    finally:
        new.kill()
        old._kill()


def test_kill_of_a_never_applied_job_is_a_no_op() -> None:
    job = ProcessJob({"hosts": 1})
    job.kill()
    assert not job.active


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hosts_from_config_end_with_the_program_that_made_them() -> None:
    result = run_controller("from_config", {})
    assert result["extent"] == {"hosts": 2}
    loops = result["loops"]
    assert len(set(loops)) == 2
    # Not a job's hosts: nobody could kill them later, so they die with their program.
    wait_until(lambda: live_in_sessions(loops) == [], 30, "the config's hosts to end")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_leased_hosts_of_a_job_outlive_a_killed_controller_and_a_rerun_gets_them_back(
    tmp_path: Path,
) -> None:
    cache = tmp_path / ".monarch" / "job_state.pkl"
    lease = f"pj-{os.getpid()}"
    args = {
        "kind": "process",
        "meshes": {"trainers": 2},
        "cache": str(cache),
        "lease": lease,
        "keep_alive": 20,
    }
    try:
        died = subprocess.run(
            [sys.executable, "-m", "job_programs", "leased", json.dumps(args)],
            capture_output=True, text=True, timeout=150, cwd=HERE,
        )  # fmt: skip
        assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]
        assert json.loads(died.stdout.splitlines()[-1]) == {"counts": [6, 6]}
        loops = _loop_pids(cache)
        again = run_controller("reattach", args)
        # The re-run's state() attached to the leased job: its hosts, the same actors
        # under the same worker loops, with their counts.
        assert again["same_hosts"] is True
        assert again["counts"] == [6, 6]
        assert sorted(w["loop"] for w in again["where"]) == loops
        assert "AttachRefusedError" in again["second"][0], again["second"]
        assert "AuthenticationError" in again["wrong_secret"][0], again["wrong_secret"]
        print(
            f"\nleased ProcessJob: re-run's state() after {again['attach_s']:.2f} s, first "
            f"answer of the attached actors {again['first_answer_s']:.2f} s (from its start)"
        )
        # Nobody attached for the lease: the job's processes end, the worker loops stay
        # and serve the next controller (a plain re-run) at once.
        leased = {pid for w in again["where"] for pid in (w["pid"], w["agent"])}
        wait_until(lambda: not leased & set(live_in_sessions(loops)), 60, "the lease to end")
        assert set(loops) <= set(live_in_sessions(loops))
        fresh = run_controller("controller", args)
        assert sorted(w["loop"] for w in fresh["meshes"]["trainers"]) == loops
    finally:
        if cache.exists():
            assert run_controller("kill", {"cache": str(cache)}) == {"active": False}
    assert live_in_sessions(loops) == []
