"""Detection: a dead or frozen worker is noticed, a busy one is left alone."""

from __future__ import annotations

import os
import signal
import time

import pytest
from faults_actors import Worker
from faults_support import run_program

import actormesh
from actormesh import ActorDiedError, proc_mesh
from actormesh.testing import wait_until

FULL = os.environ.get("ACTORMESH_FAULTS_FULL") == "1"
full_only = pytest.mark.skipif(not FULL, reason="full form only (ACTORMESH_FAULTS_FULL=1)")


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("sigkill", "killed by SIGKILL (possibly out of memory"),
        ("segv", "killed by SIGSEGV"),
        ("exit", "exited with code 3"),
    ],
)
def test_a_dying_worker_fails_the_waiting_call_at_once(
    how: str, words: str, failures: list[actormesh.Failure], figures: object
) -> None:
    procs = proc_mesh(gpus=2).get(timeout=30)
    try:
        mesh = procs.spawn("victims", Worker)
        killer = procs.spawn("killer", Worker)
        pids = list(mesh.pid.call().get(timeout=10).values())
        pending = mesh.slice(gpus=1).sleep.call_one(60)
        started = time.monotonic()
        if how == "sigkill":
            os.kill(pids[1], signal.SIGKILL)
        else:  # another actor in the same process: the victim's own queue is busy
            killer.slice(gpus=1).die.broadcast(how)
        with pytest.raises(ActorDiedError) as caught:
            pending.get(timeout=10)
        detected = time.monotonic() - started
        figures.add("detect_s", detected)  # type: ignore[attr-defined]
        # Typically under 0.1 s (the figure above is reported); the bound only says that
        # the death was noticed, not the 60 s sleep or the 10 s wait.
        assert detected < 5.0
        message = str(caught.value)
        assert words in message
        assert "'victims'" in message and "{gpus=1}" in message and "'sleep'" in message
        assert caught.value.ranks == (1,)
        # The owner hears of it once per mesh; the other rank keeps serving.
        wait_until(lambda: len(failures) >= 2, 5, "the owner to hear of the death")
        assert sorted((f.mesh, f.ranks) for f in failures if f.kind == "died") == [
            ("killer", (1,)),
            ("victims", (1,)),
        ]
        assert mesh.slice(gpus=0).echo.call_one("ok").get(timeout=10) == "ok"
    finally:
        procs.stop().get(timeout=30)


def test_a_frozen_worker_is_declared_dead_after_missed_heartbeats(figures: object) -> None:
    timeout = 1.0
    result = run_program("frozen", env={"ACTORMESH_HEARTBEAT_TIMEOUT": str(timeout)})
    figures.add("frozen_detect_s", result["detected_s"])  # type: ignore[attr-defined]
    # Silence for `timeout`, noticed at the next probe (a quarter of the timeout later):
    # about 0.9 s here (reported above); the bound leaves room for a loaded machine.
    assert result["detected_s"] < timeout + 3.0
    assert "stopped answering heartbeats" in result["error"]
    assert "frozen" in result["error"]
    assert result["survivor"] == "alive"
    assert result["failures"] == ["died"]


# The promise scaled down: the default heartbeat timeout (30 s) tolerates a GIL held (or
# a loop blocked) for 15 s, half of it; here a 6 s timeout tolerates 3 s, three missed
# probes (one a second). Silence counts from the last answer, up to a probe interval
# before the block starts: at most 4 s of the 6 here, and a loaded machine adds its own
# delays. A `def` endpoint runs on the actor's thread, and an `async def` one that blocks
# (`time.sleep`) on the actor's own loop, while the process' loop answers the heartbeats:
# both may run past the timeout.
_BUSY = {"def": ("4", "6.0"), "gil": ("6", "3.0"), "loop": ("4", "6.0")}


@pytest.mark.parametrize("kind", ["def", "gil", "loop"])
def test_a_busy_worker_is_not_declared_dead_within_the_heartbeat_timeout(kind: str) -> None:
    timeout, seconds = _BUSY[kind]
    result = run_program(
        "busy", kind, seconds, env={"ACTORMESH_HEARTBEAT_TIMEOUT": timeout}, timeout=60
    )
    assert "died" not in result, result["died"]
    assert result["value"] == float(seconds)
    assert result["after"] == "still here"
    assert result["failures"] == []


@pytest.mark.parametrize("kind", ["gil"])
def test_a_worker_silent_past_the_heartbeat_timeout_is_declared_dead(kind: str) -> None:
    # The control of the test above: the same hold, past a 1 s timeout, silences the
    # worker and gets it killed. So the hold really stops the heartbeats' answers, and
    # surviving it above is the timeout's doing.
    result = run_program("busy", kind, "3.0", env={"ACTORMESH_HEARTBEAT_TIMEOUT": "1"}, timeout=60)
    assert "stopped answering heartbeats" in result["died"], result
    assert "(limit 1 s, Config.heartbeat_timeout)" in result["died"]
    assert "its event loop is blocked" in result["died"]
    assert result["failures"] == ["died"]


@full_only
def test_a_worker_holding_the_gil_for_15_seconds_survives_the_default_timeout() -> None:
    result = run_program("busy", "gil", "15", timeout=120)
    assert result["value"] == 15.0
    assert result["failures"] == []
