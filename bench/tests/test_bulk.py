"""``python -m bench.bulk`` end to end in a small form (3 namespace hosts on slow links),
so the script that gives the published bulk figures cannot break unnoticed. It checks
what the script asserts and reports (every actor's bytes, the controller's bytes sent),
never its timings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run import ROOT


@pytest.mark.timeout(400)
def test_bulk_measures_one_link_star_and_chain_on_three_namespace_hosts(tmp_path: Path) -> None:
    if shutil.which("tc") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("bench.bulk needs network namespaces and tc: root and iproute2")
    out = tmp_path / "bulk.json"
    cmd = [sys.executable, "-m", "bench.bulk", "--hosts", "3", "--per-host", "2", "--mb", "4"]
    cmd += ["--rate", "100mbit", "--chunk", "64", "--fanouts", "1,2", "--repeat", "1"]
    cmd += ["--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    ways = results["ways"]
    assert set(ways) == {"one_link", "star", "chain", "tree_fanout_2"}
    payload = 4 << 20
    assert ways["one_link"]["actors"] == 2 and ways["star"]["actors"] == 6
    # The star sends the payload to each of the 3 agents; the chain and tree once.
    assert ways["star"]["controller_sent_bytes"] >= 3 * payload
    for way in ("chain", "tree_fanout_2"):
        assert payload <= ways[way]["controller_sent_bytes"] < payload + (1 << 20)
    assert "x one link" in done.stdout
