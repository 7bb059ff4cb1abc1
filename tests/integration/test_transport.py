"""Transport (issue 2, point 14): private Unix sockets, one pickle and one frame per process."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from integration_actors import CountsPickles, Echo

from actormesh import ProcMesh


def test_sockets_live_in_a_directory_only_the_user_can_open(procs: ProcMesh) -> None:
    echo = procs.spawn("sockets", Echo).get(timeout=30)
    dirs = set(echo.socket_dir.call().get(timeout=30).values())
    assert len(dirs) == 1
    directory = Path(dirs.pop())
    info = directory.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid()
    sockets = [p for p in directory.iterdir() if stat.S_ISSOCK(p.stat().st_mode)]
    # The controller and the four workers of the mesh each listen there.
    assert len(sockets) >= 5


def test_arguments_are_pickled_once_whatever_the_fan_out(procs: ProcMesh) -> None:
    echo = procs.spawn("fan_out", Echo).get(timeout=30)
    before = CountsPickles.pickled
    values = echo.async_echo.call(CountsPickles()).get(timeout=30)
    assert len(values) == 4
    assert all(isinstance(v[1], CountsPickles) for v in values.values())
    assert CountsPickles.pickled == before + 1
