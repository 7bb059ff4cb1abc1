"""Observability that outlives the run: metrics per step (torchforge's spelling) and
call timelines (``timeline("trace.json")``, a Chrome / Perfetto trace of every rank).

``record_metric(key, value, Reduce.MEAN)`` from any actor or the controller; the
controller's ``MetricLogger`` reduces what every rank recorded into one value per key
per step and writes it to its backends (console, a JSONL file, TensorBoard, W&B)::

    from actormesh.observability import MetricLogger, Reduce, TensorBoardBackend, record_metric


    class Trainer(Actor):
        @endpoint
        def train_step(self) -> None:
            record_metric("loss", self.step_loss(), Reduce.MEAN)


    with MetricLogger([TensorBoardBackend("runs/exp1")]) as logger:
        for step in range(100):
            trainers.train_step.call().get()
            logger.flush(step).get()

See docs/observability.md.
"""

from __future__ import annotations

from ._core import record_metric
from ._observe import (
    ConsoleBackend,
    JsonlBackend,
    MetricBackend,
    MetricLogger,
    TensorBoardBackend,
    WandbBackend,
    timeline,
)
from ._pure import Reduce

__all__ = [
    "ConsoleBackend",
    "JsonlBackend",
    "MetricBackend",
    "MetricLogger",
    "Reduce",
    "TensorBoardBackend",
    "WandbBackend",
    "record_metric",
    "timeline",
]
