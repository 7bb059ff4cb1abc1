"""The worker process: ``python -m actormesh._bootstrap`` (started by an owner).

It joins its owner over the socket named in ``ACTORMESH_PARENT``, then serves its actors
until told to shut down or until the owner goes away. It never outlives the owner: the
kernel sends it SIGTERM when the owner dies (``PR_SET_PDEATHSIG``), the owner's socket
closing ends it too, and on the way out it kills whatever it started (its process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys

from ._config import Config
from ._core import Runtime
from ._core._output import install_prefix_streams
from ._core._runtime import new_event_loop

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    # The parent may have died before prctl took effect: then we were re-parented.
    expected = os.environ.get("ACTORMESH_PARENT_PID")
    if expected and os.getppid() != int(expected):
        os._exit(0)


def _kill_descendants() -> None:
    """SIGKILL every other process of our process group (what our actors started)."""
    me, group = os.getpid(), os.getpgid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == group:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def main() -> None:
    """Run one worker until shutdown."""
    _die_with_parent()
    config = Config.from_env()
    key = os.environ["ACTORMESH_KEY"]
    if os.environ.get("ACTORMESH_OUTPUT") == "prefix":
        coords = os.environ.get("ACTORMESH_COORDS", "{}")
        install_prefix_streams(f"[{os.environ.get('ACTORMESH_PROC_MESH', 'procs')} {coords}]")
    loop = new_event_loop(config)
    asyncio.set_event_loop(loop)
    runtime = Runtime.start_worker(config, loop, key, os.environ["ACTORMESH_PARENT"])
    from ._supervision import install

    install(runtime)
    loop.add_signal_handler(signal.SIGTERM, runtime._exit_worker, "SIGTERM")
    try:
        loop.run_forever()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        _kill_descendants()
        os._exit(0)


if __name__ == "__main__":
    main()
