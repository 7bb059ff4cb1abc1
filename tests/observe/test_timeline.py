"""Timelines: the calls each rank ran, written as a Chrome / Perfetto trace, checked
against the Trace Event Format (``trace_format``) and searched for the calls made, from
Python and with ``actormesh timeline`` on a running job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from observe_support import actormesh
from telemetry_actors import Recorder
from trace_format import check_trace

from actormesh import proc_mesh
from actormesh.observability import timeline
from actormesh.testing import wait_until


def _calls(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["ph"] == "X" and e["name"] == name]


def test_a_timeline_holds_each_ranks_calls_with_queue_waits_and_sizes(tmp_path: Path) -> None:
    with proc_mesh(gpus=2).get() as procs:
        recorders = procs.spawn("recorder", Recorder)
        big = b"x" * 200_000
        recorders.echo.call(big).get()
        first = recorders.slice(gpus=0)
        # One sender's frames arrive in order: echo is queued behind hold before release
        # (a concurrent endpoint, which skips the queue) lets hold end.
        held = first.hold.call_one()
        queued = first.echo.call_one(b"y")
        first.release.call_one().get(timeout=30)
        held.get(timeout=30)
        queued.get(timeout=30)
        path = tmp_path / "trace.json"
        trace = timeline(path).get(timeout=60)

    events = check_trace(json.loads(path.read_text()))
    assert json.loads(path.read_text()) == trace
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(names) == 2
    assert any(n.startswith("recorder rank 0 (pid ") for n in names)
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads == {"recorder {gpus=0}", "recorder {gpus=1}"}

    echoes = _calls(events, "echo")
    assert len(echoes) == 3
    large = [e for e in echoes if e["args"]["bytes_in"] >= len(big)]
    assert sorted(e["args"]["rank"] for e in large) == [0, 1]
    assert all(e["args"]["ok"] and e["args"]["bytes_out"] > 0 for e in echoes)
    assert all(e["cat"] == "recorder" and e["args"]["kind"] == "def" for e in echoes)

    (hold,) = _calls(events, "hold")
    (late,) = [e for e in echoes if e["args"]["bytes_in"] < len(big)]
    assert hold["args"]["kind"] == "async"
    assert late["ts"] >= hold["ts"] + hold["dur"] - 1  # it ran after hold ended ...
    assert late["args"]["queue_ms"] > 0  # ... having waited in the mailbox meanwhile
    waits = [e for e in events if e["ph"] in ("b", "e") and e["name"] == "queued echo"]
    assert {e["pid"] for e in waits} == {late["pid"]} and len(waits) == 2
    # A concurrent endpoint's call overlaps the running one: an async slice, not an "X".
    assert not _calls(events, "release")
    (release,) = [e for e in events if e["ph"] == "b" and e["name"] == "release"]
    assert release["args"]["kind"] == "concurrent" and release["cat"] == "recorder"


def test_timeline_spans_zero_keeps_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORMESH_TIMELINE_SPANS", "0")
    with proc_mesh(gpus=1).get() as procs:
        recorders = procs.spawn("recorder", Recorder)
        recorders.echo.call(b"z").get()
        trace = timeline().get(timeout=60)
    assert not [e for e in check_trace(trace) if e["ph"] == "X"]


def test_bad_timeline_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="last must be positive"):
        timeline(last=0)


def test_actormesh_timeline_writes_a_running_jobs_calls(job_factory, tmp_path: Path) -> None:
    job = job_factory("serve", 4)
    path = tmp_path / "job.json"
    found: list[dict] = []

    def traced() -> bool:
        done = actormesh("timeline", str(job.pid), "-o", str(path), "--last", "60")
        assert done.returncode == 0, done.stderr
        assert f"to {path}" in done.stdout and "ui.perfetto.dev" in done.stdout
        found[:] = check_trace(json.loads(path.read_text()))
        ranks = {e["args"]["rank"] for e in _calls(found, "step")}
        return ranks == {0, 1, 2, 3} and bool(_calls(found, "ping"))

    wait_until(traced, 60, "steps of all 4 ranks in the timeline")
    assert all(e["cat"] == "trainer" for e in _calls(found, "step"))
    failed = [e for e in _calls(found, "fail")]
    assert failed and not failed[0]["args"]["ok"]
    only = actormesh("timeline", "--job", str(job.pid), "--mesh", "nosuch", "-o", str(path))
    assert only.returncode == 0
    assert "wrote 0 calls of 0 processes" in only.stdout
