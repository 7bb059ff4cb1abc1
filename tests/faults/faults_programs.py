"""Controller programs of the fault suite: ``python -m faults_programs NAME [ARGS]``.

Scenarios that need their own settings (a short heartbeat timeout, a small message limit)
or that kill the controller itself run as separate controller processes. Each program
prints one JSON line with what it observed as its last line of output; programs that are
killed print a JSON line with their pids first and then wait.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults_actors import BadReturns, Supervisor, Worker

import actormesh
from actormesh import proc_mesh

PROGRAMS: dict[str, Callable[..., dict[str, Any]]] = {}


def program(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    PROGRAMS[fn.__name__] = fn
    return fn


def say(data: dict[str, Any]) -> None:
    print(json.dumps(data), flush=True)


@program
def frozen() -> dict[str, Any]:
    """SIGSTOP one worker while a call waits on it: detected through missed heartbeats."""
    failures: list[actormesh.Failure] = []
    actormesh.set_failure_hook(failures.append)
    procs = proc_mesh(gpus=2).get(timeout=30)
    mesh = procs.spawn("victims", Worker)
    pids = list(mesh.pid.call().get(timeout=10).values())
    pending = mesh.slice(gpus=1).sleep.call_one(60)
    started = time.monotonic()
    os.kill(pids[1], signal.SIGSTOP)
    try:
        pending.get(timeout=30)
        error = "no error"
    except actormesh.ActorDiedError as died:
        error = str(died)
    detected = time.monotonic() - started
    survivor = mesh.slice(gpus=0).echo.call_one("alive").get(timeout=10)
    procs.stop().get(timeout=30)
    return {
        "detected_s": detected,
        "error": error,
        "survivor": survivor,
        "failures": [f.kind for f in failures],
    }


@program
def busy(kind: str, seconds: str) -> dict[str, Any]:
    """A worker busy for a while (``def`` sleep, GIL held in C, loop blocked) survives,
    unless it was silent past the heartbeat timeout (then ``died`` says why)."""
    failures: list[actormesh.Failure] = []
    actormesh.set_failure_hook(failures.append)
    procs = proc_mesh(gpus=1).get(timeout=30)
    mesh = procs.spawn("busy", Worker)
    endpoint = {"def": mesh.sleep, "gil": mesh.hold_gil, "loop": mesh.block_loop}[kind]
    try:
        value = endpoint.call_one(float(seconds)).get(timeout=120)
    except actormesh.ActorDiedError as died:  # silent past the heartbeat timeout
        procs.stop().get(timeout=30)
        return {"died": str(died), "failures": [f.kind for f in failures]}
    after = mesh.echo.call_one("still here").get(timeout=10)
    procs.stop().get(timeout=30)
    return {"value": value, "after": after, "failures": [str(f.error) for f in failures]}


@program
def too_large(limit: str) -> dict[str, Any]:
    """Arguments and results over ``Config.max_message_bytes`` fail at the sender."""
    procs = proc_mesh(gpus=1).get(timeout=30)
    mesh = procs.spawn("big", BadReturns)
    echo = procs.spawn("echo", Worker)
    size = int(limit) + 1
    out: dict[str, Any] = {}
    try:
        echo.echo.call_one(b"x" * size)
    except actormesh.MessageTooLargeError as error:
        out["argument"] = str(error)
    try:
        mesh.big.call_one(size).get(timeout=10)
    except actormesh.MessageTooLargeError as error:
        out["result"] = str(error)
    out["after"] = mesh.ping.call_one().get(timeout=10)
    procs.stop().get(timeout=30)
    return out


@program
def default_timeout() -> dict[str, Any]:
    """``Config.default_timeout`` bounds waits that give no timeout of their own."""
    procs = proc_mesh(gpus=1).get(timeout=30)
    mesh = procs.spawn("slow", Worker)
    out: dict[str, Any] = {}
    started = time.monotonic()
    try:
        mesh.sleep.call_one(60).get()
    except actormesh.CallTimeoutError as error:
        out["call"] = str(error)
    out["call_s"] = time.monotonic() - started
    try:
        [future.get() for future in mesh.sleep.stream(60)]
    except actormesh.CallTimeoutError as error:
        out["stream"] = str(error)
    procs.stop().get(timeout=30)
    return out


@program
def stop_escalation() -> dict[str, Any]:
    """A worker whose GIL is held (an hour-long C call) cannot run its event loop: it
    ignores SHUTDOWN and SIGTERM, and stop() SIGKILLs it."""
    procs = proc_mesh(gpus=2).get(timeout=30)
    mesh = procs.spawn("stuck", Worker)
    marker = Path(tempfile.mkdtemp()) / "blocked"
    pending = mesh.slice(gpus=1).hold_gil.call_one(3600, str(marker))
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the worker has no other way to say its GIL is held now
    started = time.monotonic()
    procs.stop().get(timeout=30)
    took = time.monotonic() - started
    try:
        pending.get(timeout=5)
        error = "none"
    except actormesh.MeshStoppedError as stopped:
        error = type(stopped).__name__ + ": " + str(stopped)
    codes = [child.returncode for child in procs._processes.children]
    return {"took": took, "codes": codes, "pending": error}


@program
def killed(how: str) -> dict[str, Any]:
    """Start workers and grandchildren, announce their pids, then die as ``how`` says."""
    procs = proc_mesh(gpus=2).get(timeout=30)
    owners = procs.spawn("owners", Supervisor, True)
    workers = procs.spawn("workers", Worker)
    pids = list(workers.pid.call().get(timeout=10).values())
    grandchildren = list(workers.start_sleeper.call(False).get(timeout=10).values())
    daemons = list(workers.start_sleeper.call(True).get(timeout=10).values())
    nested = [pid for pids_ in owners.start_child.call(1).get(timeout=60).values() for pid in pids_]
    nested_kids = [
        p for kids in owners.child_sleepers.call().get(timeout=30).values() for p in kids
    ]
    say(
        {
            "controller": os.getpid(),
            "workers": pids,
            "grandchildren": grandchildren + daemons + nested + nested_kids,
        }
    )
    if how == "exception":
        raise RuntimeError("the controller fails")
    if how == "exit":
        sys.exit(0)  # without stop(): atexit must clean up
    time.sleep(120)  # the test kills us (SIGKILL, SIGTERM)
    return {}


def main() -> None:
    name, *args = sys.argv[1:]
    result = PROGRAMS[name](*args)
    say(result)


if __name__ == "__main__":
    main()
