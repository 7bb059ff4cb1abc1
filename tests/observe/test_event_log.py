"""The job event log: a controller that restarts a rank, times out a call and loses an
unrestarted rank, then is killed with SIGKILL, leaves a SQLite file that ``actormesh
log`` and plain SQL read afterwards, with every event in it."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from observe_support import actormesh

from actormesh._cli._log import find_log

HERE = Path(__file__).resolve().parent


@pytest.fixture
def finished_job(tmp_path: Path) -> Path:
    """The state directory of ``event_job.py``, run to its SIGKILL."""
    env = {**os.environ, "ACTORMESH_STATE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(HERE / "event_job.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert "EVENTS DONE" in done.stdout, done.stderr
    assert done.returncode == -9
    return tmp_path


def _events(path: Path) -> list[dict[str, object]]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in db.execute("SELECT * FROM events ORDER BY id")]
    finally:
        db.close()


def test_the_event_log_survives_a_killed_controller_and_answers_sql(finished_job: Path) -> None:
    path = find_log(None, finished_job / "jobs")
    assert path.name.startswith("event_job-")
    events = _events(path)
    kinds = [e["kind"] for e in events]
    assert kinds.count("process_start") == 6  # 3 + the restarted rank 1 + 2
    assert kinds.count("mesh_spawn") == 2

    killed = [e for e in events if e["kind"] == "process_exit" and e["signal"] == 9]
    assert [e["rank"] for e in killed] == [1, 0]
    assert all(e["exit_code"] is None for e in killed)
    restart = next(e for e in events if e["kind"] == "restart")
    assert restart["rank"] == 1
    assert restart["pid"] != killed[0]["pid"]
    assert json.loads(str(restart["data"]))["old_pid"] == killed[0]["pid"]

    timeout = next(e for e in events if e["kind"] == "timeout")
    assert (timeout["mesh"], timeout["rank"]) == ("recorder", 2)
    assert "wait_forever" in str(timeout["message"])

    supervision = next(e for e in events if e["kind"] == "supervision")
    assert (supervision["mesh"], supervision["rank"]) == ("fragile", 0)
    assert json.loads(str(supervision["data"]))["failure"] == "died"

    db = sqlite3.connect(path)
    try:
        (ended,) = db.execute("SELECT ended FROM job").fetchone()
        # Which mesh each killed process served: process events joined with the
        # addresses of the meshes spawned (the query docs/observability.md shows).
        joined = db.execute(
            """SELECT m.mesh, e.rank FROM events e
               JOIN (SELECT events.mesh AS mesh, j.value AS address
                     FROM events, json_each(events.data, '$.addresses') AS j
                     WHERE kind = 'mesh_spawn') m ON e.address = m.address
               WHERE e.kind = 'process_exit' AND e.signal = 9 ORDER BY e.id"""
        ).fetchall()
    finally:
        db.close()
    assert ended is None  # killed: it never wrote its end
    assert joined == [("recorder", 1), ("fragile", 0)]


def test_actormesh_log_prints_and_filters_the_events(finished_job: Path) -> None:
    state = ["--state-dir", str(finished_job)]
    listed = actormesh("log", "--list", *state)
    assert listed.returncode == 0, listed.stderr
    name = listed.stdout.splitlines()[1].split()[-1]
    assert name.startswith("event_job-")

    shown = actormesh("log", name, *state)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"job {name}: ") and lines[0].endswith("running, or killed")
    assert any("restart " in line and "recorder" not in line for line in lines)

    pid = name.rsplit("-", 1)[1]
    exits = actormesh("log", pid, "--kind", "process_exit", "--rank", "0", *state)
    assert exits.returncode == 0, exits.stderr
    body = exits.stdout.splitlines()[1:]
    assert len(body) == 1 and "signal 9" in body[0] and "killed by SIGKILL" in body[0]

    query = "SELECT kind, count(*) FROM events GROUP BY kind"
    rows = actormesh("log", name, "--sql", query, *state)
    assert "timeout\t1" in rows.stdout.splitlines()

    missing = actormesh("log", "nosuch", *state)
    assert missing.returncode == 1
    assert "no event log of job 'nosuch'" in missing.stdout


@pytest.mark.parametrize("keep", [True, False])
def test_a_clean_exit_ends_the_job_and_event_log_off_writes_nothing(
    tmp_path: Path, keep: bool
) -> None:
    program = "from actormesh import proc_mesh; proc_mesh(gpus=2).get().stop().get()"
    env = {
        **os.environ,
        "ACTORMESH_STATE_DIR": str(tmp_path),
        "ACTORMESH_EVENT_LOG": "1" if keep else "0",
        "ACTORMESH_JOB_NAME": "clean-job",
    }
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    if not keep:
        assert not (tmp_path / "jobs").exists()
        return
    path = tmp_path / "jobs" / "clean-job.sqlite"
    db = sqlite3.connect(path)
    try:
        (ended,) = db.execute("SELECT ended FROM job WHERE name = 'clean-job'").fetchone()
        asked = db.execute(
            "SELECT json_extract(data, '$.asked') FROM events WHERE kind = 'process_exit'"
        ).fetchall()
    finally:
        db.close()
    assert ended is not None
    assert asked == [(1,), (1,)]  # stopped by their owner, not failures


def test_each_host_agent_keeps_a_log_of_its_own_workers(tmp_path: Path) -> None:
    program = (
        "from actormesh import host_mesh\n"
        "hosts = host_mesh(2).get(timeout=60)\n"
        "with hosts.spawn_procs(per_host={'gpus': 2}) as procs:\n"
        "    pass\n"
    )
    env = {**os.environ, "ACTORMESH_STATE_DIR": str(tmp_path), "ACTORMESH_JOB_NAME": "hosts"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    agents = sorted((tmp_path / "jobs").glob("hosts.agent-*.sqlite"))
    assert len(agents) == 2
    for path in agents:
        db = sqlite3.connect(path)
        try:
            (source,) = db.execute("SELECT source FROM job WHERE name = 'hosts'").fetchone()
            starts = db.execute("SELECT count(*) FROM events WHERE kind = 'process_start'")
            (count,) = starts.fetchone()
        finally:
            db.close()
        assert source == "agent"
        assert count == 2  # this host's two workers
    # The controller's own log has the agents (its children) in it.
    assert find_log("hosts", tmp_path / "jobs").name == "hosts.sqlite"


def test_a_controller_knows_where_its_event_log_is(tmp_path: Path) -> None:
    program = (
        "from actormesh import proc_mesh\n"
        "from actormesh.observability import event_log_path\n"
        "with proc_mesh(gpus=1).get():\n"
        "    print('LOG', event_log_path())\n"
    )
    env = {**os.environ, "ACTORMESH_STATE_DIR": str(tmp_path), "ACTORMESH_JOB_NAME": "where"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["LOG", str(tmp_path / "jobs" / "where.sqlite")]
    assert (tmp_path / "jobs" / "where.sqlite").is_file()


def test_a_weight_sync_leaves_its_version_in_the_log(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    program = (
        "import sqlite3\n"
        "from telemetry_actors import Model\n"
        "from actormesh import proc_mesh\n"
        "from actormesh.observability import event_log_path\n"
        "from actormesh.torch import sync_weights\n"
        "trainers = proc_mesh(gpus=1, name='t').get().spawn('trainer', Model, 1)\n"
        "generators = proc_mesh(gpus=2, name='g').get().spawn('generator', Model, 2)\n"
        "sync_weights(trainers, generators, version=3).get(timeout=60)\n"
        "same = set(generators.weight_sum.call().get().values())\n"
        "assert same == {trainers.weight_sum.call_one().get()}, same\n"
        "print('LOG', event_log_path())\n"
    )
    env = {**os.environ, "ACTORMESH_STATE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.split()[-1])
    (event,) = [e for e in _events(path) if e["kind"] == "weights"]
    assert event["mesh"] == "generator"
    assert json.loads(str(event["data"]))["version"] == 3
    assert event["message"] == "weights v3 synced from 'trainer'"


@pytest.mark.timeout(60)
def test_the_command_ends_quietly_when_its_reader_has_gone() -> None:
    # ``actormesh log --list | head -1``: the reader leaves before the listing is out.
    proc = subprocess.Popen(
        [sys.executable, "-m", "actormesh", "log", "--list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    errors = proc.stderr.read().decode()
    assert (proc.wait(timeout=50), errors) == (0, "")


@pytest.mark.timeout(60)
def test_python_dash_m_actormesh_is_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "actormesh", "--help"], capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: actormesh "), done.stderr
