"""``actormesh stacks --native``: a rank hung inside a C call that holds the GIL (its
event loop cannot answer, so its Python stacks cannot be had) is found in that C frame,
with the GIL's holder named, through py-spy."""

from __future__ import annotations

import itertools

import pytest
from observe_support import actormesh
from telemetry_actors import Recorder

from actormesh import proc_mesh
from actormesh._hosts._native_stacks import py_spy
from actormesh._observe import Stacks
from actormesh.testing import wait_until

pytestmark = pytest.mark.skipif(
    py_spy() is None, reason="py-spy is not installed (pip install 'actormesh[native]')"
)


def test_native_stacks_find_the_rank_stuck_in_c_and_the_gil_holder(job_factory) -> None:
    job = job_factory("hang", 3, script="native_job.py")
    seen: list[str] = []

    def stuck() -> bool:
        done = actormesh("stacks", "--job", str(job.pid), "--native", timeout=60)
        assert done.returncode == 0, done.stderr
        seen[:] = [done.stdout]
        return "sleep (libc" in done.stdout

    wait_until(stuck, 60, "rank 2 inside libc's sleep")
    out = seen[0]
    assert out.startswith("recorder (3 ranks)")
    # Ranks 0 and 1 are idle and alike; rank 2 is alone, its loop blocked.
    idle = out[out.index("ranks 0-1: idle") : out.index("rank 2: ")]
    assert "GIL: not held" in idle
    assert "  actor thread:\n" in idle
    stuck_rank = out[out.index("rank 2: ") :]
    assert stuck_rank.startswith("rank 2: no answer")  # its loop cannot run Python
    assert "GIL: held by actor thread" in stuck_rank
    actor = stuck_rank[stuck_rank.index("actor thread (holds the GIL):") :]
    frames = list(itertools.takewhile(lambda line: line.startswith("    "), actor.splitlines()[1:]))
    assert frames[0].strip().startswith(("clock_nanosleep (libc", "nanosleep (libc"))
    assert any(f.strip().startswith("sleep (libc") for f in frames)
    assert any(
        f.strip().startswith("Recorder.sleep_in_c (") and "telemetry_actors.py:" in f
        for f in frames
    )
    # Python's own stacks of the same rank cannot be had: it says so.
    plain = actormesh("stacks", "--job", str(job.pid), "--rank", "2", timeout=60)
    assert "rank 2: no answer" in plain.stdout


def test_stacks_without_native_frames_are_unchanged(job_factory) -> None:
    job = job_factory("hang", 2, script="native_job.py")
    done = actormesh("stacks", "--job", str(job.pid), "--rank", "0", timeout=60)
    assert "GIL" not in done.stdout and "rank 0: idle" in done.stdout


def test_mesh_stacks_native_from_python_shows_the_c_frame() -> None:
    with proc_mesh(gpus=2).get() as procs:
        recorders = procs.spawn("recorder", Recorder)
        recorders.initialized.get()
        pending = recorders.slice(gpus=1).sleep_in_c.call_one(20)
        seen: list[Stacks] = []

        def stuck() -> bool:
            seen[:] = [recorders.stacks(native=True).get(timeout=60)]
            return "\n    sleep (libc" in seen[0].by_rank[1]

        wait_until(stuck, 60, "rank 1 inside libc's sleep")
        assert "GIL: held by actor thread" in seen[0].by_rank[1]
        assert "GIL: not held" in seen[0].by_rank[0]
        del pending
