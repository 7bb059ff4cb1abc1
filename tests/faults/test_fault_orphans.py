"""No orphans: however the controller ends, its workers and what they started exit in 2 s."""

from __future__ import annotations

import os
import signal
import time

import pytest
from faults_support import read_json_line, start_program, wait_gone


@pytest.mark.parametrize("how", ["sigkill", "sigterm", "exception", "exit"])
def test_every_process_exits_within_two_seconds_of_the_controller(
    how: str, figures: object
) -> None:
    controller = start_program("killed", how)
    try:
        pids = read_json_line(controller, timeout=60)
        everyone = [*pids["workers"], *pids["grandchildren"]]
        # Per worker: a sleeper, a daemon (new session), and an actor's own process mesh
        # of one worker with its sleeper and daemon.
        assert len(pids["workers"]) == 2 and len(pids["grandchildren"]) == 10
        started = time.monotonic()
        if how == "sigkill":
            os.kill(controller.pid, signal.SIGKILL)
        elif how == "sigterm":
            os.kill(controller.pid, signal.SIGTERM)
        controller.wait(timeout=30)
        left = wait_gone(everyone, 2.0)
        figures.add("orphan_cleanup_s", time.monotonic() - started)  # type: ignore[attr-defined]
        assert left == [], f"still running 2 s after the controller ended: {left}"
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        for pipe in (controller.stdout, controller.stderr):
            if pipe is not None:
                pipe.close()
