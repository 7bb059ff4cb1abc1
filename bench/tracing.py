"""``python -m bench.tracing``: the cost per call of timelines and OpenTelemetry tracing.

One actor in one worker process, called with no-op ``call_one`` calls: sequential round
trips (``--calls`` of them, timed together) and pipelined ones (``--calls`` x 2 issued,
then awaited), in a fresh controller per mode, the modes interleaved round by round
(``--rounds``), best round of each kept (noise on a shared machine only ever adds):

- ``off``: ``ACTORMESH_TIMELINE_SPANS=0``, ``ACTORMESH_OTEL=off``;
- ``timeline``: the defaults (the timeline rings on, OpenTelemetry off);
- ``otel-noop``: ``ACTORMESH_OTEL=on`` with no SDK provider (no-op spans);
- ``otel-sdk``: ``ACTORMESH_OTEL=otlp``, exporting to a stand-in OTLP/HTTP collector
  on loopback run by this script (every span recorded and exported);
- ``otel-sampled``: as ``otel-sdk`` with 1% of traces sampled
  (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``).

The OpenTelemetry modes are left out when ``opentelemetry-sdk`` is not installed.
Prints a Markdown table. ``bench/tests/test_tracing.py`` runs a small form.
"""

from __future__ import annotations

import argparse
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

MODES: dict[str, dict[str, str]] = {
    "off": {"ACTORMESH_TIMELINE_SPANS": "0", "ACTORMESH_OTEL": "off"},
    "timeline": {"ACTORMESH_OTEL": "off"},
    "otel-noop": {"ACTORMESH_OTEL": "on"},
    "otel-sdk": {"ACTORMESH_OTEL": "otlp"},
    "otel-sampled": {
        "ACTORMESH_OTEL": "otlp",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
    },
}


def _child(calls: int) -> dict[str, float]:
    """Measure in this process (a fresh controller with the mode's environment)."""
    from actormesh import Actor, endpoint, proc_mesh

    class Noop(Actor):
        @endpoint
        def noop(self) -> None:
            return None

    procs = proc_mesh(gpus=1).get()
    try:
        actor = procs.spawn("noop", Noop).slice(gpus=0)
        for _ in range(min(500, calls)):
            actor.noop.call_one().get()
        start = time.perf_counter()
        for _ in range(calls):
            actor.noop.call_one().get()
        sequential = (time.perf_counter() - start) / calls
        start = time.perf_counter()
        futures = [actor.noop.call_one() for _ in range(2 * calls)]
        for future in futures:
            future.get()
        pipelined = 2 * calls / (time.perf_counter() - start)
    finally:
        procs.stop().get()
    return {"rtt_us": sequential * 1e6, "pipelined": pipelined}


class _Collector:
    """A stand-in OTLP/HTTP collector on loopback that accepts and drops everything."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _run(mode: str, calls: int, collector: _Collector | None) -> dict[str, float]:
    env = {**os.environ, **MODES[mode]}
    if collector is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
    done = subprocess.run(
        [sys.executable, "-m", "bench.tracing", "--child", "--calls", str(calls)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mode {mode} failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def measure(rounds: int, calls: int, modes: list[str]) -> dict[str, dict[str, float]]:
    """The best round of each mode: lowest round trip, highest pipelined rate."""
    best: dict[str, dict[str, float]] = {}
    collector = _Collector() if any(m.startswith("otel") for m in modes) else None
    try:
        for _ in range(rounds):
            for mode in modes:
                found = _run(mode, calls, collector if mode.startswith("otel") else None)
                have = best.setdefault(mode, dict(found))
                have["rtt_us"] = min(have["rtt_us"], found["rtt_us"])
                have["pipelined"] = max(have["pipelined"], found["pipelined"])
    finally:
        if collector is not None:
            collector.close()
    return best


def table(best: dict[str, dict[str, float]]) -> str:
    """The Markdown table of ``measure``'s results."""
    lines = [
        "| mode | sequential round trip (µs) | pipelined calls/s |",
        "|---|---|---|",
    ]
    lines.extend(
        f"| {mode} | {r['rtt_us']:.1f} | {r['pipelined']:,.0f} |" for mode, r in best.items()
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (best kept)")
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per round")
    parser.add_argument("--modes", help="comma-separated modes (default: all available)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be positive")
    if args.child:
        print(json.dumps(_child(args.calls)), flush=True)
        return 0
    have_sdk = importlib.util.find_spec("opentelemetry.sdk") is not None
    modes = args.modes.split(",") if args.modes else list(MODES)
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown} (known: {', '.join(MODES)})")
    if not have_sdk:
        modes = [mode for mode in modes if not mode.startswith("otel")]
    load = os.getloadavg()[0]
    best = measure(args.rounds, args.calls, modes)
    print(f"best of {args.rounds} rounds, {args.calls} calls; 1-min load average {load:.1f}")
    print(table(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
