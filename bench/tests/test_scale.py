"""``python -m bench.scale`` end to end in a small form (3 namespace hosts, the agents
also as a tree of fan-out 2), so the script that gives the published scale figures
cannot break unnoticed."""

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
def test_scale_measures_agents_tree_and_flat_on_three_namespace_hosts(tmp_path: Path) -> None:
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("bench.scale needs network namespaces: root and the ip command")
    out, figure = tmp_path / "scale.json", tmp_path / "scale.png"
    cmd = [sys.executable, "-m", "bench.scale", "--hosts", "3", "--per-host", "2"]
    cmd += ["--calls", "20", "--actors", "12", "--fan-out", "2", "--rounds", "2"]
    cmd += ["--out", str(out), "--figure", str(figure)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    # One frame per host per cast through the agents, one per child of the controller
    # through the tree, one per process flat.
    assert results["agents"]["frames_per_cast"] == 3
    assert results["tree"]["frames_per_cast"] == 2
    assert results["flat"]["frames_per_cast"] == 6
    assert results["agents"]["many"]["actors"] == results["tree"]["many"]["actors"] == 12
    for way in ("agents", "tree", "flat"):
        assert 0 < results[way]["gather_median_us"] < 10_000_000
    assert figure.stat().st_size > 0
    assert "frames" in done.stdout
