"""No orphans: however the controller ends, its workers and what they started exit.

The promise is 2 s (usually 0.1 s): how long it took is each run's ``orphan_cleanup_s``
figure, in the fault report. The test itself fails only on processes that stay, with a
deadline a loaded machine cannot reach: everything they started sleeps for 1000 s.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from faults_support import read_json_line, start_program, wait_gone

ORPHAN_DEADLINE_S = 30.0


@pytest.mark.parametrize("how", ["sigkill", "sigterm", "exception", "exit"])
def test_every_process_exits_after_the_controller(how: str, figures: object) -> None:
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
        left = wait_gone(everyone, ORPHAN_DEADLINE_S)
        figures.add("orphan_cleanup_s", time.monotonic() - started)  # type: ignore[attr-defined]
        assert left == [], f"still running {ORPHAN_DEADLINE_S} s after the controller: {left}"
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        for pipe in (controller.stdout, controller.stderr):
            if pipe is not None:
                pipe.close()
