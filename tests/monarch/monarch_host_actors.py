"""Actor classes of the host tests (bootstrap commands, worker loops), written as a Monarch
0.7 user writes them: only ``actormesh.actor`` is imported, endpoints are all ``def``.

Workers import this module by name (``conftest.py`` puts this directory on
``PYTHONPATH``), so it stays cheap to import.
"""

from __future__ import annotations

import os
from pathlib import Path

from actormesh.actor import Actor, endpoint, this_host

WRAPPER_VARIABLE = "MONARCH_TEST_WRAPPER_PID"


class EnvProbe(Actor):
    """Says what its process sees: environment variables, pid, command line."""

    @endpoint
    def get_env(self, name: str) -> str | None:
        return os.environ.get(name)

    @endpoint
    def environ(self) -> dict[str, str]:
        return dict(os.environ)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def cmdline(self) -> list[str]:
        return Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1]

    @endpoint
    def spawn_inner(self) -> EnvProbe:
        """An ``EnvProbe`` in a process this one spawns on ``this_host()``."""
        return this_host().spawn_procs(per_host={"procs": 1}).spawn("inner", EnvProbe)

    @endpoint
    def crash(self) -> None:
        os._exit(3)
