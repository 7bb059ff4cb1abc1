"""Leased jobs on this host's agents (``host_mesh(n)``): a controller that exits leaves the
job running until its lease; one that shuts it down ends it and forgets its record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from integration_support import run_script

from actormesh.testing import live, wait_until

pytestmark = pytest.mark.timeout(180)

# Starts a leased job of two local agents, prints the workers' and agents' pids, and then
# either returns (leaving the job detached) or shuts the job down.
_PROGRAM = """
import json, os, sys
import actormesh
from actormesh import Actor, endpoint

class Pid(Actor):
    @endpoint
    def pid(self):
        return os.getpid(), os.getppid()

hosts = actormesh.host_mesh(2, name="local-job", keep_alive=float(sys.argv[1])).get(timeout=90)
pids = hosts.spawn_procs(per_host={"gpus": 1}, name="p").spawn("pids", Pid)
found = pids.pid.call().get(timeout=30).values()
record = os.path.join(os.environ["ACTORMESH_JOBS_DIR"], "local-job.json")
print(json.dumps({"pids": sorted({p for pair in found for p in pair}), "record": record}))
if sys.argv[2] == "shutdown":
    hosts.shutdown().get(timeout=60)
    print(json.dumps({"record_left": os.path.exists(record)}))
"""


def _jobs(env: dict[str, str]) -> str:
    listed = subprocess.run(
        [sys.executable, "-m", "actormesh._cli", "jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


def test_a_controller_that_returns_leaves_its_job_until_the_lease_ends(tmp_path: Path) -> None:
    env = {"ACTORMESH_JOBS_DIR": str(tmp_path / "jobs")}
    done = run_script(_PROGRAM, tmp_path, args=("4", "return"), env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout.splitlines()[-1])
    pids = started["pids"]  # the workers and their agents
    assert len(pids) == 4 and live(pids) == pids  # the controller is gone; they are not
    row = next(line for line in _jobs({**os.environ, **env}).splitlines() if "local-job" in line)
    assert "detached" in row and " 2/2 " in row
    wait_until(lambda: not live(pids), 60, "the lease to end the job")
    row = next(line for line in _jobs({**os.environ, **env}).splitlines() if "local-job" in line)
    assert "gone" in row and " 0/2 " in row  # the record stays until `actormesh kill`


def test_a_job_shut_down_by_its_controller_ends_and_forgets_its_record(tmp_path: Path) -> None:
    env = {"ACTORMESH_JOBS_DIR": str(tmp_path / "jobs")}
    done = run_script(_PROGRAM, tmp_path, args=("600", "shutdown"), env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    started, ended = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert ended == {"record_left": False}
    assert not Path(started["record"]).exists()
    wait_until(lambda: not live(started["pids"]), 30, "the job's processes to end")


def test_a_second_job_of_a_running_job_s_name_is_refused(tmp_path: Path) -> None:
    env = {"ACTORMESH_JOBS_DIR": str(tmp_path / "jobs")}
    first = run_script(_PROGRAM, tmp_path, args=("600", "return"), env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    pids = json.loads(first.stdout.splitlines()[-1])["pids"]
    try:
        second = run_script(_PROGRAM, tmp_path, args=("600", "return"), env=env, timeout=120)
        assert second.returncode != 0
        assert "ValueError: a job named 'local-job' is running" in second.stderr
        assert live(pids) == pids  # the running job was left alone
    finally:
        killed = subprocess.run(
            [sys.executable, "-m", "actormesh._cli", "kill", "local-job"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert killed.returncode == 0, killed.stderr
    wait_until(lambda: not live(pids), 30, "the job to end")
    # Its record is gone with it: the name is free again.
    again = run_script(_PROGRAM, tmp_path, args=("600", "shutdown"), env=env, timeout=120)
    assert again.returncode == 0, again.stderr


def test_lease_of_hosts_refuses_what_cannot_be_leased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actormesh

    monkeypatch.setenv("ACTORMESH_JOBS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="this_host\\(\\) cannot be leased"):
        actormesh.this_host().lease("here", keep_alive=10)
    hosts = actormesh.host_mesh(2).get(timeout=90)
    try:
        with pytest.raises(ValueError, match="keep_alive must be positive"):
            hosts.lease("bad", keep_alive=0)
        with pytest.raises(ValueError, match="job's name"):
            hosts.lease("no/slash", keep_alive=10)
        with pytest.raises(ValueError, match="whole host mesh"):
            hosts.slice(hosts=0).lease("half", keep_alive=10)
        hosts.spawn_procs(per_host={"gpus": 1}, name="early")
        with pytest.raises(ValueError, match="before spawning processes"):
            hosts.lease("late", keep_alive=10)
        assert not (tmp_path / "late.json").exists()  # nothing was leased or recorded
    finally:
        hosts.shutdown().get(timeout=60)
