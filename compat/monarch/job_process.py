"""Conformance program for ``monarch.job``: a ``ProcessJob``'s hosts, cached and re-attached.

The program is its own controller three times over, each a fresh process (as a user
re-runs a script): ``start`` gets the job's host mesh from ``job.state()`` (which starts
the hosts and saves the job in the cache file), spawns processes and actors there and
calls them, and exits without ending the job; ``attach`` builds the same ``ProcessJob``
and calls ``state()`` again, which must find the cached job (same ``apply_id``: no new
hosts) and give host meshes that work; ``kill`` loads the cached job and ends it. The
parent checks each step and prints one line of JSON with what it saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from monarch.actor import Actor, current_rank, endpoint
from monarch.job import ProcessJob, job_load

MESHES = {"trainers": 2, "dataloaders": 1}


class Square(Actor):
    """Answers with its rank and the square of what it was sent."""

    @endpoint
    def square(self, x: int) -> tuple[dict[str, int], int]:
        return dict(current_rank()), x * x


def controller(phase: str, cache: str) -> dict[str, object]:
    if phase == "kill":
        job = job_load(cache)
        job.kill()
        return {"active_after_kill": job.active}
    job = ProcessJob(MESHES)
    state = job.state(cached_path=cache)
    # (not isinstance of monarch.job.JobState: Monarch 0.7 returns another class of that
    # name, from monarch._src.job.job)
    assert type(state).__name__ == "JobState"
    trainers = state.trainers.spawn_procs(per_host={"gpus": 2})
    loaders = state.dataloaders.spawn_procs()
    squares = trainers.spawn("square", Square).square.call(7).get()
    loader = loaders.spawn("square", Square).square.call(3).get()
    try:
        getattr(state, "evaluators")  # noqa: B009  (the attribute access is the test)
    except AttributeError as error:
        missing = str(error)
    else:
        missing = ""
    return {
        "apply_id": job.apply_id,
        "active": job.active,
        "trainer_extent": dict(state.trainers.extent),
        "loader_extent": dict(state.dataloaders.extent),
        "squares": sorted((sorted(point.items()), value) for point, value in squares.values()),
        "loader": [value for _, value in loader.values()],
        "missing": missing,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        cache = os.path.join(scratch, ".monarch", "job_state.pkl")

        def run(phase: str) -> dict[str, object]:
            done = subprocess.run(
                [sys.executable, __file__, phase, cache],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            return json.loads(done.stdout.strip().splitlines()[-1])

        first = run("start")
        assert os.path.exists(cache), "state() saves the job in the cache"
        again = run("attach")
        assert again["apply_id"] == first["apply_id"], (first, again)  # the same hosts
        for result in (first, again):
            assert result["active"] is True
            assert result["trainer_extent"] == {"hosts": 2}, result
            assert result["loader_extent"] == {"hosts": 1}, result
            assert result["loader"] == [9], result
            assert "dataloaders, trainers" in str(result["missing"]), result
        killed = run("kill")
        assert killed == {"active_after_kill": False}, killed
        summary = {k: v for k, v in again.items() if k != "apply_id"}
        print(json.dumps({"reattached": True, **summary}, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(controller(sys.argv[1], sys.argv[2])), flush=True)
    else:
        main()
