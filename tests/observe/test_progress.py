"""Progress lines for long operations: shown when asked (or on a terminal), never in logs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = """
    import actormesh._hosts._progress as progress
    progress.DELAY = 0.0  # show at once: this test need not wait 2 s to see it
    from actormesh import proc_mesh
    procs = proc_mesh(gpus=3).get()
    procs.stop().get()
    print("END")
"""


def run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ACTORMESH_PROGRESS": mode},
    )


def test_progress_of_spawn_and_stop_when_asked(tmp_path: Path) -> None:
    done = run(tmp_path, "always")
    assert done.returncode == 0, done.stderr
    assert "spawning 3 processes: 3/3 joined" in done.stderr
    assert "stopping 3 processes: 3/3 exited" in done.stderr
    assert done.stdout == "END\n"


def test_no_progress_into_a_log_by_default(tmp_path: Path) -> None:
    done = run(tmp_path, "auto")  # stderr is a pipe here, as in a log or a notebook
    assert done.returncode == 0, done.stderr
    assert "spawning" not in done.stderr and "stopping" not in done.stderr


WEIGHT_SYNC = """
    import torch
    import actormesh._hosts._progress as progress
    progress.DELAY = 0.0
    from actormesh import Actor, actor_mesh
    from actormesh.torch import sync_weights

    class Holder(Actor):
        def __init__(self) -> None:
            self.model = torch.nn.Linear(8, 8)

    trainers = actor_mesh(Holder, shape=2, name="trainers").get()
    generators = actor_mesh(Holder, shape=2, name="generators").get()
    report = sync_weights(trainers, generators, version=3).get()
    trainers.stop().get()
    generators.stop().get()
    print("END", report.version)
"""


def test_progress_of_weight_sync_counts_the_trainers(tmp_path: Path) -> None:
    script = tmp_path / "sync.py"
    script.write_text(textwrap.dedent(WEIGHT_SYNC))
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "ACTORMESH_PROGRESS": "always"},
    )
    assert done.returncode == 0, done.stderr
    assert "weight sync v3: 2/2 trainers sent" in done.stderr
    assert done.stdout == "END 3\n"
