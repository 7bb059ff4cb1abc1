"""OpenTelemetry (``ACTORMESH_OTEL``): one trace covers a controller's span, its call,
the actors that ran it and the calls they made, with runtime metrics per rank, all read
back from the SDK's in-memory exporters of each process (``otel_job.py``). Off, nothing
of OpenTelemetry is imported anywhere."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs actormesh[otel]")

HERE = Path(__file__).resolve().parent


def _run(program: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *program],
        env={**os.environ, **env},
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=100,
    )


def _one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [span for span in spans if span["name"] == name]
    assert len(found) == 1, (name, spans)
    return found[0]


def test_one_trace_covers_the_controller_call_its_actors_and_their_calls() -> None:
    done = _run(["otel_job.py"], ACTORMESH_OTEL="on")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["values"] == [0, 2]

    controller = found["controller"]["spans"]
    step = _one(controller, "train_step")
    call = _one(controller, "worker.work")
    assert call["kind"] == "CLIENT" and call["parent"] == step["id"]
    trace = step["trace"]
    assert call["trace"] == trace

    helper_spans = found["helper"]["spans"]
    pings = [span for span in helper_spans if span["name"] == "ping"]
    assert len(pings) == 2
    for rank, worker in enumerate(found["workers"]):
        spans = worker["spans"]
        work = _one(spans, "work")
        assert work["kind"] == "SERVER"
        assert (work["trace"], work["parent"]) == (trace, call["id"])
        assert work["attributes"]["actormesh.rank"] == rank
        assert work["attributes"]["actormesh.mesh"] == "worker"
        inner = _one(spans, "inner")  # span() in the endpoint: a child of its call's span
        assert (inner["trace"], inner["parent"]) == (trace, work["id"])
        compute = _one(spans, "compute")  # @traced
        assert compute["parent"] == work["id"]
        nested = _one(spans, "helper.ping")  # the actor's own call, a child of its span
        assert nested["kind"] == "CLIENT" and nested["parent"] == inner["id"]
        (ran,) = [span for span in pings if span["parent"] == nested["id"]]
        assert ran["trace"] == trace and ran["kind"] == "SERVER"
        assert ran["pid"] != work["pid"]  # in the helper's process

        points = {
            (p["name"], p["attributes"].get("endpoint"), p["attributes"].get("ok")): p
            for p in worker["metrics"]
        }
        calls = points[("actormesh.calls", "work", True)]
        assert calls["attributes"] == {"mesh": "worker", "rank": rank, "endpoint": "work",
                                       "ok": True}  # fmt: skip
        assert calls["value"] == 1
        assert points[("actormesh.calls", "work", False)]["value"] == 0
        assert points[("actormesh.call.duration", "work", None)]["value"]["count"] == 1
        assert points[("actormesh.bytes.received", "work", None)]["value"] > 0
        assert points[("actormesh.bytes.sent", "work", None)]["value"] > 0
        assert ("actormesh.queue.depth", None, None) in points
    latency = [
        p for p in found["controller"]["metrics"]
        if p["name"] == "actormesh.call.latency" and p["attributes"]["endpoint"] == "work"
    ]  # fmt: skip
    assert latency and latency[0]["value"]["count"] == 1


PROBE = """
import sys
from telemetry_actors import Recorder
from actormesh import proc_mesh
from actormesh.actor import get_meter, span, traced

with proc_mesh(gpus=1).get() as procs:
    recorders = procs.spawn("recorder", Recorder)
    recorders.echo.call(b"x").get()
    with span("user"):
        get_meter().create_counter("c").add(1)
    workers = recorders.imported.call_one("opentelemetry").get()
print("CONTROLLER", sys.modules.get("opentelemetry") is not None, "WORKER", workers)
"""


def test_with_otel_off_nothing_of_opentelemetry_is_imported() -> None:
    # The extra is installed here: a guard in sys.modules stands for its absence.
    done = _run(["-c", PROBE], ACTORMESH_OTEL="off")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-4:] == ["CONTROLLER", "True", "WORKER", "False"]
    # (The controller imported it for span() and get_meter(), which the program called;
    # the runtime itself imported nothing in the worker.)


def test_otel_on_without_the_package_warns_and_runs() -> None:
    # The guard is in the controller only: its workers have the package (and use it).
    hidden = "import sys; sys.modules['opentelemetry'] = None\n" + PROBE
    done = _run(["-c", hidden], ACTORMESH_OTEL="on")
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning: ACTORMESH_OTEL=on but OpenTelemetry is not installed" in done.stderr
    assert done.stdout.split()[-4:] == ["CONTROLLER", "False", "WORKER", "True"]


class _Collector:
    """A stand-in OTLP/HTTP collector on loopback: keeps each request's path and body."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_otlp_exports_spans_and_metrics_of_every_process_to_a_collector() -> None:
    traces_pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    collector = _Collector()
    program = (
        "from telemetry_actors import Recorder\n"
        "from actormesh import proc_mesh\n"
        "with proc_mesh(gpus=2).get() as procs:\n"
        "    procs.spawn('recorder', Recorder).echo.call(b'x').get()\n"
    )
    try:
        done = _run(
            ["-c", program],
            ACTORMESH_OTEL="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
            OTEL_SERVICE_NAME="otlp-test",
        )
    finally:
        collector.close()
    assert done.returncode == 0, done.stderr
    spans: list[tuple[str, str, dict[str, Any]]] = []
    for path, body in collector.received:
        if path != "/v1/traces":
            continue
        request = traces_pb.ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            attributes = {a.key: a.value for a in resource.resource.attributes}
            role = attributes["actormesh.role"].string_value
            assert attributes["service.name"].string_value == "otlp-test"
            for scope in resource.scope_spans:
                spans.extend((role, span.name, attributes) for span in scope.spans)
    assert ("controller", "recorder.echo") in {(role, name) for role, name, _ in spans}
    ranks = {a["actormesh.rank"].int_value for role, name, a in spans if name == "echo"}
    assert ranks == {0, 1}  # each worker exported its own span, with its rank
    assert any(path == "/v1/metrics" for path, _ in collector.received)
