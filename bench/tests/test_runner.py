"""The runner end to end on the floor (no peer needed), and its process hygiene."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import procfs
from bench.run import ROOT, _merge, _run_system
from bench.systems import Entry


def test_a_system_that_is_not_installed_is_reported_for_every_workload(tmp_path: Path) -> None:
    ghost = Entry("ghost", "Ghost", "bench.systems.ghost_sys", "no_such_module_for_bench", None)
    out = _run_system(ghost, ["rtt_async", "spawn_4"], quick=True, logs=tmp_path)
    assert out["status"] == "not installed"
    assert out["workloads"] == {
        "rtt_async": {"status": "not installed"},
        "spawn_4": {"status": "not installed"},
    }


@pytest.mark.timeout(180)
def test_one_command_measures_writes_json_and_a_table(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench", "--quick", "--systems", "floor"]
    cmd += ["--workloads", "rtt_sync,gather_4,idle_rss_mb,choose_skewed,payload_sweep"]
    cmd += ["--out", str(tmp_path / "results"), "--figures", str(tmp_path / "figures")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "results" / "latest.json").read_text())
    floor = results["systems"]["floor"]["workloads"]
    assert floor["rtt_sync"]["status"] == "ok"
    assert 0 < floor["rtt_sync"]["metrics"]["median_us"] < 10_000
    assert floor["gather_4"]["status"] == "ok"
    assert floor["choose_skewed"]["status"] == "n/a"
    assert floor["idle_rss_mb"]["metrics"]["torch_loaded"] is False
    assert "| rtt_sync | median | µs |" in done.stdout
    assert (tmp_path / "figures" / "payload_bandwidth.png").stat().st_size > 0
    assert results["systems"]["floor"]["leftover_processes"] == 0


def test_procfs_sees_a_descendant_and_ends_one_that_ignores_sigterm() -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print(1, flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    child.stdout.readline()  # SIGTERM is ignored from here on
    try:
        assert child.pid in procfs.descendants(os.getpid())
        assert procfs.rss_mb(child.pid) > 1
        t0 = time.monotonic()
        assert procfs.end_processes([child.pid], grace=0.5) == [child.pid]
        assert time.monotonic() - t0 < 5
        child.wait(timeout=5)  # already reaped by end_processes, or reaped here
        assert child.pid not in procfs.descendants(os.getpid())
    finally:
        if child.poll() is None:
            child.kill()


def test_rounds_merge_to_the_median_of_the_rounds_that_succeeded() -> None:
    def round_(status: str, median: float) -> dict[str, Any]:
        result: dict[str, Any] = {"status": status}
        if status == "ok":
            result["metrics"] = {"median_us": median, "verified": True, "method": "x"}
        return {"label": "L", "status": "ok", "leftover_processes": 1, "workloads": {"w": result}}

    merged = _merge(
        [round_("ok", 10.0), round_("timeout", 0.0), round_("ok", 30.0), round_("ok", 20.0)]
    )
    w = merged["workloads"]["w"]
    assert w["status"] == "ok"
    assert w["metrics"] == {"median_us": 20.0, "verified": True, "method": "x"}
    assert len(w["rounds"]) == 3
    assert merged["leftover_processes"] == 4
