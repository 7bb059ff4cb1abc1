"""OpenTelemetry for the runtime: a span per call, its context carried with the call,
and runtime metrics per rank (``actormesh[otel]``, ``Config.otel``).

Off by default. With ``Config.otel`` (``ACTORMESH_OTEL``) ``"on"`` in a process, it
imports the OpenTelemetry API and, through the process' tracer and meter providers:

- a caller (the controller, or an actor calling another mesh) starts a *client* span
  per call (``<mesh>.<endpoint>``), child of whatever span is current, ended when every
  rank answered or failed (or the caller gave up), and sends its W3C ``traceparent``
  in the CALL header (its ninth item: ``with_trace``, the one change to the header);
- each actor that runs the call starts a *server* span (``<endpoint>``), child of that
  context, current while the endpoint runs: spans the endpoint opens (``span()``,
  ``@traced``) and calls it makes are its children, so one trace covers a controller's
  call, the actors that ran it and the calls those made;
- metrics, by mesh, rank and endpoint: ``actormesh.calls`` (ok or not),
  ``actormesh.call.duration`` and ``actormesh.call.queue_wait`` (s),
  ``actormesh.bytes.received`` / ``actormesh.bytes.sent`` (arguments in, answers out),
  ``actormesh.queue.depth`` (observed at each export), and in the caller
  ``actormesh.call.latency`` (s) and ``actormesh.process.exits`` /
  ``actormesh.restarts`` (from the job event log's events).

``"otlp"`` also installs the SDK's providers with OTLP/HTTP exporters (the endpoint
from OpenTelemetry's own ``OTEL_EXPORTER_OTLP_ENDPOINT``), for processes nobody else
configures (the workers). Where the extra is not installed, nothing is imported and
``ACTIVE`` stays False: the hot path reads that one global.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "ACTIVE",
    "call_ended",
    "call_started",
    "configure",
    "event",
    "run_ended",
    "run_started",
    "with_trace",
]

log = logging.getLogger("actormesh.otel")

ACTIVE = False  # read on every call: everything below runs only when it is True
_configured = False
_api: dict[str, Any] = {}  # the OpenTelemetry names used, imported by configure()
_instruments: dict[str, Any] = {}
# (mesh, rank, endpoint) -> [calls that returned, calls that raised, bytes in, bytes out]:
# counted here per call (a few additions) and read by observable counters at each
# export, since an SDK counter's add() costs more than the rest of a call's bookkeeping.
_totals: dict[tuple[str, int, str], list[int]] = {}

QueueDepths = Callable[[], Iterable[tuple[str, int, int]]]  # (mesh, rank, queued)


def configure(config: Any, role: str, queue_depths: QueueDepths | None = None) -> None:
    """Turn tracing on in this process if ``config.otel`` asks (once; any thread).

    ``role``: ``"controller"`` or ``"worker"`` (a resource attribute with ``"otlp"``);
    ``queue_depths``: what ``actormesh.queue.depth`` observes (a worker's mailboxes).
    """
    global ACTIVE, _configured
    if _configured:
        return
    _configured = True
    mode = getattr(config, "otel", "off")
    if mode == "off":
        return
    try:
        from opentelemetry import context, metrics, trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
    except ImportError:
        # A warning, not a log record: the library configures no logging, and whoever
        # set ACTORMESH_OTEL expects traces.
        warnings.warn(
            f"ACTORMESH_OTEL={mode} but OpenTelemetry is not installed (pip install "
            "'actormesh[otel]'): no traces or metrics",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    if mode == "otlp":
        _install_otlp(role)
    _api.update(
        context=context,
        trace=trace,
        propagator=TraceContextTextMapPropagator(),
        tracer=trace.get_tracer("actormesh"),
        client=trace.SpanKind.CLIENT,
        server=trace.SpanKind.SERVER,
        error=trace.Status(trace.StatusCode.ERROR),
    )
    meter = metrics.get_meter("actormesh")
    _observe_totals(meter, metrics)
    _instruments.update(
        duration=meter.create_histogram("actormesh.call.duration", "s", "an actor's run time"),
        queue=meter.create_histogram(
            "actormesh.call.queue_wait", "s", "time a call waited in the actor's mailbox"
        ),
        latency=meter.create_histogram(
            "actormesh.call.latency", "s", "a call's round trip, as its caller saw it"
        ),
        exits=meter.create_counter("actormesh.process.exits", "{process}", "worker exits"),
        restarts=meter.create_counter("actormesh.restarts", "{restart}", "ranks restarted"),
    )
    if queue_depths is not None:
        _observe_queues(meter, metrics, queue_depths)
    ACTIVE = True


def _observe_totals(meter: Any, metrics: Any) -> None:
    def observer(index: int, ok: bool | None) -> Callable[[Any], Iterable[Any]]:
        def observe(options: Any) -> Iterable[Any]:
            found = []
            for (mesh, rank, endpoint), counts in list(_totals.items()):
                attributes: dict[str, Any] = {"mesh": mesh, "rank": rank, "endpoint": endpoint}
                if ok is not None:
                    attributes["ok"] = ok
                found.append(metrics.Observation(counts[index], attributes))
            return found

        return observe

    meter.create_observable_counter(
        "actormesh.calls", [observer(0, True), observer(1, False)], "{call}", "calls run"
    )
    meter.create_observable_counter(
        "actormesh.bytes.received", [observer(2, None)], "By", "call arguments received"
    )
    meter.create_observable_counter(
        "actormesh.bytes.sent", [observer(3, None)], "By", "answers sent"
    )


def _observe_queues(meter: Any, metrics: Any, queue_depths: QueueDepths) -> None:
    def observe(options: Any) -> Iterable[Any]:
        return [
            metrics.Observation(queued, {"mesh": mesh, "rank": rank})
            for mesh, rank, queued in queue_depths()
        ]

    meter.create_observable_gauge(
        "actormesh.queue.depth", [observe], "{message}", "messages waiting in mailboxes"
    )


def _install_otlp(role: str) -> None:
    """The SDK's providers exporting over OTLP/HTTP, unless the process has its own."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as error:
        log.warning("ACTORMESH_OTEL=otlp needs the SDK and OTLP exporter: %s", error)
        return
    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "actormesh",
            "actormesh.role": role,
            "process.pid": os.getpid(),
            "host.name": socket.gethostname(),
            **_rank_attributes(),
        }
    )
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))


def _rank_attributes() -> dict[str, Any]:
    # A worker's place in its process mesh, from the environment its owner gave it.
    found: dict[str, Any] = {}
    if os.environ.get("ACTORMESH_RANK"):
        found["actormesh.rank"] = int(os.environ["ACTORMESH_RANK"])
    if os.environ.get("ACTORMESH_PROC_MESH"):
        found["actormesh.proc_mesh"] = os.environ["ACTORMESH_PROC_MESH"]
    return found


# -- the caller's side ------------------------------------------------------------------


def call_started(mesh: str, endpoint: str, ranks: int) -> tuple[Any, float]:
    """Start the client span of a call to ``ranks`` actors (only when ``ACTIVE``); the
    caller ends it with ``call_ended`` once every rank answered or failed."""
    span = _api["tracer"].start_span(
        f"{mesh}.{endpoint}",
        kind=_api["client"],
        attributes={"actormesh.mesh": mesh, "actormesh.endpoint": endpoint,
                    "actormesh.ranks": ranks},
    )  # fmt: skip
    return span, time.monotonic()


def call_ended(call: tuple[Any, float], mesh: str, endpoint: str, failed: bool) -> None:
    """End a call's client span (any thread) and record its latency. (Not a callback on
    the call's future: one would make its replies go through the runtime's loop.)"""
    span, started = call
    if failed:
        span.set_status(_api["error"])
    span.end()
    seconds = time.monotonic() - started
    _instruments["latency"].record(seconds, {"mesh": mesh, "endpoint": endpoint})


def with_trace(header: Any, call: tuple[Any, float] | None = None) -> Any:
    """``header`` (a ``headers.Call``) with the trace context of ``call`` (what
    ``call_started`` returned; default: the current span) as its ``trace``."""
    if call is not None:
        ctx = _api["trace"].set_span_in_context(call[0])
    else:
        ctx = _api["context"].get_current()
    carrier: dict[str, str] = {}
    _api["propagator"].inject(carrier, context=ctx)
    parent = carrier.get("traceparent")
    if parent is None:
        return header
    return header._replace(trace=parent)


# -- the actor's side -------------------------------------------------------------------


def run_started(message: Any) -> tuple[Any, Any, float]:
    """Start the server span of ``message`` (a call about to run) and make it current in
    this context; pass what it returns to ``run_ended``."""
    parent_id = getattr(message, "trace", None)
    parent = _api["propagator"].extract({"traceparent": parent_id}) if parent_id else None
    hosted = getattr(message, "hosted", None)
    mesh = getattr(hosted, "mesh_name", "")
    span = _api["tracer"].start_span(
        message.endpoint,
        context=parent,
        kind=_api["server"],
        attributes={"actormesh.mesh": mesh, "actormesh.rank": getattr(message, "rank", -1),
                    "actormesh.endpoint": message.endpoint},
    )  # fmt: skip
    token = _api["context"].attach(_api["trace"].set_span_in_context(span))
    return span, token, time.monotonic()


def run_ended(started: tuple[Any, Any, float], message: Any, ok: bool) -> None:
    """End the span ``run_started`` began and count the call (same context)."""
    span, token, began = started
    _api["context"].detach(token)
    if not ok:
        span.set_status(_api["error"])
    span.end()
    hosted = getattr(message, "hosted", None)
    mesh, rank = getattr(hosted, "mesh_name", ""), getattr(message, "rank", -1)
    attributes = {"mesh": mesh, "rank": rank, "endpoint": message.endpoint}
    now = time.monotonic()
    _instruments["duration"].record(now - began, attributes)
    arrived = getattr(message, "arrived", 0.0)
    if arrived:
        _instruments["queue"].record(max(0.0, began - arrived), attributes)
    counts = _totals.get((mesh, rank, message.endpoint))
    if counts is None:
        counts = _totals[(mesh, rank, message.endpoint)] = [0, 0, 0, 0]
    counts[0 if ok else 1] += 1
    payload = getattr(message, "payload", None)
    if payload is not None:
        counts[2] += len(payload) + sum(b.nbytes for b in message.buffers)
        counts[3] += getattr(message, "reply_bytes", 0)


def event(kind: str, fields: dict[str, Any]) -> None:
    """A job event (``Runtime.record_event``): count process exits and restarts."""
    rank = fields.get("rank")
    attributes = {"mesh": fields.get("mesh") or "", "rank": -1 if rank is None else rank}
    if kind == "restart":
        _instruments["restarts"].add(1, attributes)
    elif kind == "process_exit" and not fields.get("asked"):
        _instruments["exits"].add(1, attributes)
