"""Actors the telemetry tests (metrics, event log, timelines, native stacks) run in real
processes (importable by the workers)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
from typing import Any

from actormesh import Actor, current_rank, endpoint
from actormesh.observability import Reduce, record_metric


class Recorder(Actor):
    """Each rank records metrics derived from its rank and the step."""

    def __init__(self) -> None:
        self.rank = current_rank().rank
        self.held = asyncio.Event()

    @endpoint
    async def hold(self) -> None:
        # Runs until ``release``: calls sent after it wait in the mailbox meanwhile.
        await self.held.wait()
        self.held.clear()

    @endpoint(concurrent=True)
    async def release(self) -> None:
        self.held.set()

    @endpoint
    def train_step(self, step: int) -> None:
        # Two values per rank per step, so reductions see more than one value per rank.
        for value in (self.rank + step, self.rank + step + 0.5):
            record_metric("loss", value, Reduce.MEAN)
            record_metric("tokens", value, Reduce.SUM)
            record_metric("reward/max", value, Reduce.MAX)
            record_metric("reward/min", value, Reduce.MIN)
            record_metric("reward/std", value, "std")

    @endpoint
    async def record_async(self, key: str, value: float) -> None:
        record_metric(key, value, Reduce.SUM)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def imported(self, module: str) -> bool:
        return sys.modules.get(module) is not None

    @endpoint
    def wait_forever(self) -> None:
        threading.Event().wait()

    @endpoint
    def echo(self, payload: bytes) -> int:
        return len(payload)

    @endpoint
    def sleep_in_c(self, seconds: int) -> None:
        # A blocking C call that holds the GIL: libc's sleep(3) through ctypes.PyDLL
        # (which, unlike CDLL, keeps the GIL). The whole process stops running Python,
        # its event loop included: only native stacks can say where it is.
        ctypes.PyDLL(None).sleep(seconds)


_MEMORY: list[Any] = []  # this process' (span exporter, metric reader), once installed


def install_memory_exporters() -> tuple[Any, Any]:
    """OpenTelemetry's SDK providers for this process, exporting to memory (once)."""
    if not _MEMORY:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _MEMORY.extend((exporter, reader))
    return _MEMORY[0], _MEMORY[1]


def finished_spans() -> list[dict[str, Any]]:
    """The spans this process' memory exporter holds, as plain data."""
    exporter, _ = install_memory_exporters()
    return [
        {
            "name": span.name,
            "trace": f"{span.context.trace_id:032x}",
            "id": f"{span.context.span_id:016x}",
            "parent": f"{span.parent.span_id:016x}" if span.parent else None,
            "kind": span.kind.name,
            "attributes": dict(span.attributes or {}),
            "pid": os.getpid(),
        }
        for span in exporter.get_finished_spans()
    ]


def metric_points() -> list[dict[str, Any]]:
    """Every data point of this process' metrics, as plain data."""
    _, reader = install_memory_exporters()
    points = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = {"count": point.count, "sum": point.sum}
                    points.append(
                        {"name": metric.name, "attributes": dict(point.attributes), "value": value}
                    )
    return points


class Traced(Actor):
    """Runs calls under OpenTelemetry, with memory exporters in its process."""

    def __init__(self) -> None:
        install_memory_exporters()
        self.rank = current_rank().rank

    @endpoint
    def work(self, helpers: Any) -> int:
        from actormesh.actor import span, traced

        @traced
        def compute() -> int:
            return self.rank * 2

        with span("inner"):
            helpers.ping.call_one().get()
        return compute()

    @endpoint
    async def ping(self) -> str:
        return "pong"

    @endpoint
    def telemetry(self) -> dict[str, Any]:
        return {"spans": finished_spans(), "metrics": metric_points()}


class Model(Actor):
    """Holds a small torch model (``self.model``, what ``sync_weights`` reads and sets)."""

    def __init__(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)
        self.model = torch.nn.Linear(4, 1)

    @endpoint
    def weight_sum(self) -> float:
        return float(self.model.weight.sum())
