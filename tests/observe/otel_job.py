"""A controller traced with OpenTelemetry (``ACTORMESH_OTEL=on`` in its environment and
its workers'): ``python otel_job.py``.

Every process exports to memory (``telemetry_actors.install_memory_exporters``). Under
a span of its own it calls ``work`` on a ``worker`` mesh of 2 ranks; each rank calls
``ping`` on a ``helper`` mesh in another process, inside a span of its own, then a
``@traced`` function. It prints one JSON line: the spans and metric points of the
controller, of each worker rank and of the helper.
"""

from __future__ import annotations

import json

from telemetry_actors import Traced, finished_spans, install_memory_exporters, metric_points

from actormesh import proc_mesh
from actormesh.actor import span


def main() -> None:
    install_memory_exporters()
    helpers = proc_mesh(gpus=1, name="helpers").get().spawn("helper", Traced)
    workers = proc_mesh(gpus=2, name="workers").get().spawn("worker", Traced)
    with span("train_step"):
        values = workers.work.call(helpers).get()
    found = {
        "values": sorted(values.values()),
        "controller": {"spans": finished_spans(), "metrics": metric_points()},
        "workers": [workers.slice(gpus=r).telemetry.call_one().get() for r in range(2)],
        "helper": helpers.telemetry.call_one().get(),
    }
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
