"""The settings of the after-the-run tools, and the event log's writer on its own (a
real SQLite file): names, columns, JSON data, the job's end."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from actormesh import Config
from actormesh._hosts._event_log import EventLog, job_name, open_event_log


def test_observability_settings_come_from_the_environment() -> None:
    environ = {
        "ACTORMESH_OTEL": "otlp",
        "ACTORMESH_TIMELINE_SPANS": "0",
        "ACTORMESH_EVENT_LOG": "0",
        "ACTORMESH_STATE_DIR": "/somewhere",
        "ACTORMESH_JOB_NAME": "nightly",
    }
    assert Config.from_env(environ) == Config(
        otel="otlp", timeline_spans=0, event_log=False, state_dir="/somewhere", job_name="nightly"
    )
    with pytest.raises(ValueError, match="otel must be 'off', 'on' or 'otlp', not 'yes'"):
        Config(otel="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeline_spans must be >= 0"):
        Config(timeline_spans=-1)


def test_job_names_are_file_names_that_never_start_with_a_dash() -> None:
    assert job_name("/home/me/train.py", 42, 0.0) == "train-19700101-000000-42"
    assert job_name("-c", 7, 0.0) == "c-19700101-000000-7"
    assert job_name("", 7, 0.0) == "python-19700101-000000-7"
    assert job_name("my job!.py", 1, 0.0).startswith("my_job-")


def test_the_writer_keeps_columns_data_and_the_end(tmp_path: Path) -> None:
    log = open_event_log(Config(state_dir=str(tmp_path), job_name="unit"), "controller")
    assert isinstance(log, EventLog)
    log.record("process_exit", rank=1, pid=99, signal=9, message="killed", asked=False)
    log.record("weights", mesh="gen", version=3)
    log.close()
    log.record("timeout", mesh="late")  # after close: dropped, no error
    db = sqlite3.connect(tmp_path / "jobs" / "unit.sqlite")
    try:
        rows = db.execute("SELECT kind, rank, pid, signal, mesh, data FROM events").fetchall()
        (ended,) = db.execute("SELECT ended FROM job").fetchone()
    finally:
        db.close()
    assert [row[:5] for row in rows] == [
        ("process_exit", 1, 99, 9, None),
        ("weights", None, None, None, "gen"),
    ]
    assert [json.loads(row[5]) for row in rows] == [{"asked": False}, {"version": 3}]
    assert ended is not None
    assert open_event_log(Config(event_log=False), "controller") is None
