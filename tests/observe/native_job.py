"""A controller with a rank stuck in C: ``python native_job.py hang N``.

It spawns a ``recorder`` mesh of N ranks, has rank N-1 call ``sleep_in_c`` (libc's
``sleep`` holding the GIL, so its process runs no Python at all, its event loop
included), prints ``READY <pid>`` and waits until its stdin closes.
"""

from __future__ import annotations

import os
import sys

from telemetry_actors import Recorder

from actormesh import proc_mesh


def main() -> None:
    size = int(sys.argv[2])
    procs = proc_mesh(gpus=size).get()
    recorders = procs.spawn("recorder", Recorder)
    recorders.initialized.get()
    pending = recorders.slice(gpus=size - 1).sleep_in_c.call_one(120)
    print(f"READY {os.getpid()}", flush=True)
    sys.stdin.read()
    del pending
    procs.stop().get()


if __name__ == "__main__":
    main()
