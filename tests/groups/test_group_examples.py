"""The actor-group examples run to completion and show what they promise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

pytestmark = pytest.mark.slow


def run_example(name: str, *args: str) -> str:
    """Run one example as a user would; its stdout (stderr must stay empty)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=REPO,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", f"{name} wrote to stderr:\n{done.stderr}"
    return done.stdout


def test_actor_group_runs_the_proposals_example() -> None:
    out = run_example("actor_group.py")
    assert "4 actors, shape {dp=2, tp=2}" in out
    assert "model rank 3 at {'dp': 1, 'tp': 1}" in out
    assert "choose spread 40 calls over ranks: [0, 1, 2, 3]" in out
    # chunk i went to rank i: x * 10 + rank
    assert "[0.0, 10.0, 21.0, 31.0, 42.0, 52.0, 63.0, 73.0]" in out
    assert "shard(list) along dp: ['a@dp0', 'b@dp0', 'c@dp1', 'd@dp1']" in out


@pytest.mark.timeout(110)
def test_weight_sync_changes_the_generators_each_step() -> None:
    out = run_example("weight_sync.py", "--mb", "8", "--steps", "2")
    steps = re.findall(
        r"step (\d): .*sync ([\d.]+) MB in [\d.]+ s = \d+ MB/s .*version \[(\d)\], "
        r"output \S+ \(changed: (\w+)\)",
        out,
    )
    assert [(s, v, c) for s, _, v, c in steps] == [("1", "1", "True"), ("2", "2", "True")], out
    assert all(7.5 < float(mb) < 8.5 for _, mb, _, _ in steps)


@pytest.mark.timeout(110)
def test_rl_loop_learns_with_rollouts_made_by_the_latest_weights() -> None:
    out = run_example("rl_loop.py", "--steps", "5", "--rollouts", "12")
    lines = out.splitlines()
    assert len(lines) == 5
    for step, line in enumerate(lines):
        assert f"made by version [{step}]" in line, line
        assert f"weights v{step + 1} sent" in line
    rewards = [float(re.search(r"reward ([\d.]+)", line)[1]) for line in lines]  # type: ignore[index]
    assert rewards[-1] > rewards[0]
