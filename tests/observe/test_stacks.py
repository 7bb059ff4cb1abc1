"""``actormesh stacks`` and ``mesh.stacks()``: a deliberately stuck rank is found.

The job's rank 3 hangs in ``allreduce_forever`` while ranks 0-2 are idle; its stacks,
grouped, say exactly that, from the command line and from Python.
"""

from __future__ import annotations

import re
from typing import Any

from observe_actors import Trainer
from observe_support import actormesh

from actormesh import proc_mesh
from actormesh.testing import wait_until


def _stacks_once_stuck(*args: str) -> Any:
    """``actormesh stacks ARGS`` once the job's rank 3 is inside the collective and the
    others are idle (the job says READY just before it makes that call)."""
    seen: list[Any] = []

    def settled() -> bool:
        seen[:] = [actormesh("stacks", *args)]
        out = seen[0].stdout
        return "in allreduce_forever" in out and ": idle" in out and "running 'step'" in out

    wait_until(settled, 30, "rank 3 to be stuck and the others idle")
    return seen[0]


def test_stacks_of_a_job_group_the_idle_ranks_and_show_the_stuck_one(job_factory) -> None:
    job = job_factory("stuck", 4)
    done = _stacks_once_stuck("--job", str(job.pid))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("trainer (4 ranks)")
    assert "ranks 0-2: idle" in out
    stuck = out[out.index("rank 3: running 'step'") :]
    assert re.match(r"rank 3: running 'step' for \d+\.\d s", stuck)
    assert "actor thread (running 'step')" in stuck
    assert "in allreduce_forever" in stuck
    assert "observe_actors.py" in stuck


def test_stacks_select_ranks_and_meshes(job_factory) -> None:
    job = job_factory("stuck", 4)
    done = _stacks_once_stuck("--job", str(job.pid), "--rank", "1", "--rank", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("trainer (2 ranks)\nrank 1: idle\nrank 3: running 'step'")
    missing = actormesh("stacks", "--job", str(job.pid), "--mesh", "nosuch")
    assert missing.returncode == 1
    assert "has no running mesh named 'nosuch'" in missing.stdout


def test_mesh_stacks_from_python_names_the_rank_that_hangs() -> None:
    with proc_mesh(gpus=3).get() as procs:
        trainers = procs.spawn("trainer", Trainer)
        trainers.initialized.get()
        pending = trainers.step.call(2)  # rank 2 hangs
        seen: list[Any] = []

        def hanging() -> bool:
            # Until the call has reached rank 2 and its thread is inside the collective
            # (the mailbox says "running" a moment before the endpoint's first line runs).
            seen[:] = [trainers.stacks().get(timeout=30)]
            idle = all(seen[0].by_rank[rank].startswith("idle") for rank in (0, 1))
            return idle and "in allreduce_forever" in seen[0].by_rank[2]

        wait_until(hanging, 30, "rank 2 inside allreduce_forever, ranks 0-1 idle")
        stacks = seen[0]
        text = str(stacks)
        assert text.startswith("trainer (3 ranks)\nranks 0-1: ")
        assert "rank 2: running 'step'" in text
        assert "in allreduce_forever" in stacks.by_rank[2]
        assert [group.ranks for group in stacks.groups][-1] == (2,)
        one = trainers.slice(gpus=1).stacks().get(timeout=30)
        assert list(one.by_rank) == [1]
        pending.cancel()


def test_no_job_is_a_clear_error(monkeypatch) -> None:
    done = actormesh("stacks", "--job", "1")
    assert done.returncode == 1
    assert "no running actormesh job '1' of this user" in done.stderr
