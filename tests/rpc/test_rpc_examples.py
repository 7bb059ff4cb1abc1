"""The RPC examples run as users run them (``torch.multiprocessing.spawn``) and learn."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_parameter_server_rnn_example_trains_until_the_loss_falls() -> None:
    out = run_example("rpc_parameter_server_rnn.py", "--epochs", "4", "--batches", "8", timeout=140)
    losses = [float(x) for x in re.findall(r"epoch \d+: mean loss ([\d.]+)", out)]
    assert len(losses) == 4, out
    assert losses[-1] < losses[0] / 2, out


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_reinforce_example_running_reward_rises() -> None:
    out = run_example(
        "rpc_reinforce.py",
        *("--episodes", "30", "--observers", "1", "--lr", "0.03", "--steps", "200"),
        timeout=140,
    )
    running = [float(x) for x in re.findall(r"running reward ([\d.]+)", out)]
    assert len(running) == 3, out
    # A policy that does not learn keeps the running reward near 20 (the start is 10).
    assert running[-1] > running[0] + 5 and running[-1] > 25, out
