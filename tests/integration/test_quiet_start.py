"""A program that starts host agents and workers writes nothing of actormesh's own to
the user's terminal: no warnings, no tracebacks, when nothing went wrong."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROGRAM = """
from actormesh import Actor, endpoint, host_mesh

class Echo(Actor):
    @endpoint
    def echo(self, x):
        return x

hosts = host_mesh(2).get(timeout=60)
procs = hosts.spawn_procs(per_host={"gpus": 1})
print(sorted(procs.spawn("echo", Echo).echo.call(7).get(timeout=60).values()))
hosts.shutdown().get(timeout=30)
"""


@pytest.mark.timeout(120)
def test_a_host_mesh_starts_and_stops_without_a_word_on_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[7,", "7]"]
    # (Agents started with ``-m`` on a module their package imports made runpy warn.)
    assert done.stderr == "", done.stderr


NEVER_JOINS = """
from actormesh.actor import BootstrapCommand, this_host
command = BootstrapCommand("/bin/sleep", None, ["1000"], {})  # a worker that never joins
try:
    this_host().spawn_procs(per_host={"gpus": 2}, bootstrap_command=command)
except TimeoutError as error:
    print("TimeoutError:", error)
"""


@pytest.mark.timeout(120)
def test_a_spawn_that_times_out_raises_and_prints_nothing_else() -> None:
    env = {**os.environ, "ACTORMESH_SPAWN_TIMEOUT": "3"}
    done = subprocess.run(
        [sys.executable, "-c", NEVER_JOINS], capture_output=True, text=True, timeout=100, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("TimeoutError: worker processes of rank(s) [0, 1] did not join")
    # The workers it killed ended their waits with errors: none printed as never retrieved.
    assert done.stderr == "", done.stderr
