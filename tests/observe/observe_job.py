"""A controller for the observability tests: ``python observe_job.py MODE [N]``.

It spawns a ``trainer`` mesh of N ranks (default 4), prints ``READY <pid>`` and then:

- ``serve``: calls ``step`` and ``ping`` in a loop until its stdin closes (for top);
- ``stuck``: has rank N-1 hang in ``allreduce_forever`` until stdin closes (for stacks);
- ``breakpoint``: calls ``inspect`` on every rank given in argv[3] (``0,2``), prints
  their results, then ``DONE`` (for debug);
- ``breakpoint_async``: the same with ``inspect_async``;
- ``service``: also runs a service ``gen`` of 2 replicas x {tp: 2} of ``Trainer`` and
  routes ``step`` through it in a loop, refitting its weights every 20 calls (for top's
  services view).
"""

from __future__ import annotations

import sys
import threading
import time

from observe_actors import Trainer

from actormesh import ReplicaFailedError, proc_mesh, spawn_service


def _load(actors: object, version: int) -> None:
    """The service's weights: nothing to load, the version is what top shows."""


def main() -> None:
    mode = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    procs = proc_mesh(gpus=size).get()
    trainers = procs.spawn("trainer", Trainer)
    trainers.initialized.get()
    print(f"READY {__import__('os').getpid()}", flush=True)
    stop = threading.Event()
    if mode in ("serve", "stuck", "service"):  # the debugger's prompt reads stdin in the others
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    if mode == "serve":
        with_errors = False
        while not stop.is_set():
            trainers.step.call().get()
            trainers.ping.call().get()
            if not with_errors:
                try:
                    trainers.slice(gpus=1).fail.call().get()
                except ValueError:
                    with_errors = True
            time.sleep(0.05)
    elif mode == "service":
        gen = spawn_service(
            "gen", Trainer, replicas=2, per_replica={"tp": 2}, load_weights=_load
        ).get()
        calls = 0
        while not stop.is_set():
            try:
                gen.step.route().get()
            except ReplicaFailedError:  # a rank the test killed was running it
                continue
            calls += 1
            if calls % 20 == 0:
                gen.update_weights().get()
            time.sleep(0.02)
        gen.stop().get()
    elif mode == "stuck":
        pending = trainers.step.call(size - 1)
        stop.wait()
        del pending
    elif mode.startswith("breakpoint"):
        ranks = [int(r) for r in sys.argv[3].split(",")]
        endpoint = "inspect_async" if mode == "breakpoint_async" else "inspect"
        futures = [getattr(trainers.slice(gpus=r), endpoint).call_one() for r in ranks]
        results = [f.get() for f in futures]
        print("RESULTS", results, flush=True)
        others = trainers.ping.call().get()
        print("OTHERS", sorted(others.values()), flush=True)
    procs.stop().get()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
