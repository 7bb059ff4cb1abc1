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


@pytest.mark.parametrize("kind", ["def", "gil", "loop"])
def test_a_busy_worker_is_not_declared_dead_within_the_heartbeat_timeout(kind: str) -> None:
    # A long `def` endpoint runs on the actor's thread: the loop answers heartbeats
    # throughout. Holding the GIL in C or blocking the loop silences the worker, which is
    # tolerated up to the timeout (here 4 s scaled down from the default 30 s: silence
    # counts from the last answer, up to a probe interval before the block starts, and a
    # loaded machine adds its own delays).
    seconds = {"def": "6", "gil": "1.2", "loop": "1.2"}[kind]
    result = run_program(
        "busy", kind, seconds, env={"ACTORMESH_HEARTBEAT_TIMEOUT": "4"}, timeout=60
    )
    assert result["value"] == float(seconds)
    assert result["after"] == "still here"
    assert result["failures"] == []


@full_only
def test_a_worker_holding_the_gil_for_15_seconds_survives_the_default_timeout() -> None:
    result = run_program("busy", "gil", "15", timeout=120)
    assert result["value"] == 15.0
    assert result["failures"] == []
