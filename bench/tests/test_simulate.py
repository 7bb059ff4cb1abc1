"""``python -m bench.simulate`` end to end in a small form (16 and 64 simulated hosts), so
the simulation cannot break unnoticed. It checks that the figures are sane (every reply
gathered, one frame per host per cast through one level of agents, deaths detected),
never how fast anything was."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run import ROOT
from bench.simulate import tree_support


@pytest.mark.timeout(300)
def test_simulate_measures_16_and_64_hosts(tmp_path: Path) -> None:
    out, figure = tmp_path / "simulate.json", tmp_path / "simulate.png"
    cmd = [sys.executable, "-m", "bench.simulate", "--hosts", "16", "64", "--casts", "5"]
    cmd += ["--heartbeat-timeout", "2", "--idle", "0.5", "--size-timeout", "240"]
    cmd += ["--out", str(out), "--figure", str(figure), "--calibrate", str(tmp_path / "no.json")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert [size["hosts"] for size in document["sizes"]] == [16, 64]
    for size in document["sizes"]:
        hosts = size["hosts"]
        assert "error" not in size, size
        assert size["actors"] == hosts * 16
        # Every actor answered, each with its own rank (nothing lost or misrouted).
        assert size["gathered"] == size["actors"] and size["gathered_ranks_ok"]
        # One frame out and one REPLIES back per child of the controller per cast: a call
        # to the whole mesh goes by its plan, a PLANNED_CAST to each agent up to the
        # fan-out (16 by default), to each of the 16 on top of a tree above it.
        children = min(hosts, 16)
        kind = "PLANNEDCAST"
        assert size["cast_frames"]["sent"].get(kind) == children
        assert size["frames_sent_per_cast"] == children
        assert size["cast_frames"]["received"].get("REPLIES") == children
        assert size["frames_received_per_cast"] == children
        # spawn_procs asks each child of the controller once (through the tree), and
        # each answers once for its subtree.
        assert size["spawn_procs_frames"]["sent"].get("HOSTOP") == children
        assert size["spawn_procs_frames"]["received"].get("REPLY") == children
        # The actors' spawn goes as a cast too (the spec shared by every process), one
        # frame per child of the controller, and so does the first call, after the plan
        # it teaches them.
        assert size["spawn_actors_frames"]["sent"] == {
            "CAST" if hosts <= 16 else "TREECAST": children,
            "CASTPLAN": children,
            "PLANNEDCAST": children,
        }
        # A planned cast names no rank: its frames do not grow with the mesh.
        assert size["cast_frames"]["sent_bytes"][kind] < 250 * children
        for name in ("broadcast", "reduce"):  # (the controller's calls per cast: not per host)
            assert size[f"{name}_calls"] < 3000
        # A slice's calls tell each actor the slice's shape in a few numbers (its
        # offset and strides), not its every rank: its bytes grow with the actors, not
        # with their square (a process' header is about 120 bytes).
        assert size["slice_cast_bytes"] < 200 * size["actors"]
        for name in ("cast", "reduce", "broadcast"):
            assert size[f"{name}s_timed"] >= 2
            assert size[f"{name}_cpu_controller_us"] > 0 and size[f"{name}_wall_ms"] > 0
        assert size["memory_per_host_bytes"] > 0
        # A dead agent and a frozen one each failed the call waiting on them, and the
        # other hosts answered the next cast.
        assert size["detect_dead_leaf_s"] is not None
        assert size["detect_frozen_leaf_s"] is not None
        assert size["after_deaths_answered"] == (hosts - 2) * 16
        assert size["stop_procs_s"] > 0 and size["shutdown_hosts_s"] > 0
    # The model fitted to these costs predicts a positive latency at every size.
    predictions = document["model"]["predictions"]
    assert [p["hosts"] for p in predictions][-1] == 10_000
    assert all(p["one_level_ms"] > 0 and p["tree_ms"] > 0 for p in predictions)
    assert "frames sent by the controller per cast" in done.stdout
    if importlib.util.find_spec("matplotlib") is not None:
        assert figure.stat().st_size > 0


def test_tree_support_names_how_a_fan_out_is_given() -> None:
    support = tree_support()
    assert support is None or (support[0] in ("argument", "config") and support[1])


@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", ["during", "after", "registered", "adopter", "unadopted"])
def test_calls_made_as_a_dead_relay_is_handled_go_around_it(case: str) -> None:
    program = Path(__file__).with_name("tree_death_race.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # (it imports bench.sim_hosts)
    done = subprocess.run(
        [sys.executable, str(program), case], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    # Hosts 4..7 hang under host 0, whose agent died: their actors (ranks 8..15) answer
    # (a simulated actor answers with its rank); in "adopter", hosts 20..23 (40..47).
    expected: dict[str, object] = {"answered": list(range(8, 16))}
    if case == "adopter":
        expected = {"answered": list(range(40, 48))}
    if case == "unadopted":  # (they end after their window, 1 s: not at once, not never)
        assert 0.5 < outcome.get("ended", 0) < 10, outcome
        return
    if case in ("after", "registered"):
        expected["own_failed"] = True
    assert outcome == expected
