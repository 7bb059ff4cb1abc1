"""A controller whose job event log the tests read after it is gone:
``python event_job.py``.

It spawns a ``recorder`` mesh of 3 ranks that restart, kills rank 1 (SIGKILL) and waits
for its restart, lets a call to rank 2 time out, spawns a mesh of 2 ranks that do not
restart and kills its rank 0, prints ``EVENTS DONE`` and then kills itself with SIGKILL,
so nothing runs at its exit: what the log holds was committed while it ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from telemetry_actors import Recorder

from actormesh import CallTimeoutError, proc_mesh, set_failure_hook


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def main() -> None:
    failures = []
    set_failure_hook(failures.append)
    procs = proc_mesh(gpus=3, restart="rank").get()
    recorders = procs.spawn("recorder", Recorder)
    pids = recorders.pid.call().get()
    os.kill(pids[1], signal.SIGKILL)

    def restarted() -> bool:
        try:
            return recorders.slice(gpus=1).pid.call_one().get(timeout=5) != pids[1]
        except Exception:
            return False

    _wait(restarted, "rank 1 to be restarted")
    with contextlib.suppress(CallTimeoutError):
        recorders.slice(gpus=2).wait_forever.call_one().get(timeout=0.5)
    other = proc_mesh(gpus=2).get().spawn("fragile", Recorder)
    os.kill(other.pid.call().get()[0], signal.SIGKILL)
    _wait(lambda: failures, "the death of fragile rank 0 to be reported")
    print("EVENTS DONE", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
