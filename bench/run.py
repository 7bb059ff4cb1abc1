"""``python -m bench``: every workload, every installed system, one table.

Each (system, group of workloads) runs in a fresh worker process (``bench.worker``),
one after another, never two at once, so one system cannot disturb another. A
watchdog gives each workload its time limit from the catalog: past it the worker and
everything it started are ended, the workload is marked ``timeout`` and the rest run
in a new worker. The runner is a child subreaper, so whatever a system leaves behind
is re-parented here and ended before the next system starts.

Outputs: the table on stdout (Markdown), ``bench/results/<timestamp>.json`` and
``latest.json`` (raw results), ``latest.md`` (table and machine), PNG charts in
``bench/figures/``, and each worker's output in ``bench/results/logs/``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import procfs
from bench.catalog import GROUPS, WORKLOADS, by_name
from bench.charts import draw
from bench.report import render
from bench.systems import SYSTEMS, Entry, entry

__all__ = ["main"]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
_SETUP_LIMIT_S = 120.0  # import + hello, and the gap between two workloads


def _machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
    except OSError:
        pass
    mem_gib = 0.0
    try:
        with open("/proc/meminfo") as f:
            mem_gib = int(next(ln for ln in f if ln.startswith("MemTotal")).split()[1]) / 2**20
    except (OSError, StopIteration):
        pass
    cores = os.cpu_count() or 0
    python = platform.python_version()
    summary = f"{model or platform.machine()}, {cores} cores, {mem_gib:.0f} GiB, "
    summary += f"Linux {platform.release()}, Python {python}"
    return {
        "cpu": model,
        "cores": cores,
        "mem_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": python,
        "summary": summary,
    }


def _compile_bytecode() -> None:
    """Write the bytecode of actormesh and of the benchmark's own modules, as ``pip
    install`` does for the peers' packages. actormesh is installed in editable mode here,
    and with ``PYTHONDONTWRITEBYTECODE`` set (this machine sets it) every fresh
    interpreter of the run (``spawn_4``'s, each worker's) would compile them from
    source: 0.1 s or more of start-up the peers do not pay."""
    for package in (ROOT / "src" / "actormesh", BENCH):
        compileall.compile_dir(package, quiet=1)


def _worker_env(sys_entry: Entry) -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "PYTHONUNBUFFERED": "1",
        "RAY_USAGE_STATS_ENABLED": "0",  # Ray would otherwise try to phone home
        **sys_entry.env,
    }


class _Watch:
    """One worker process: its events, under the catalog's time limits."""

    def __init__(self, sys_entry: Entry, names: list[str], quick: bool, log: Path) -> None:
        self.names = names
        self.quick = quick
        self.events: list[dict[str, Any]] = []
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "bench.worker", "--system", sys_entry.name]
        cmd += ["--workloads", ",".join(names), "--fd", str(write_fd)]
        cmd += ["--quick"] if quick else []
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                pass_fds=(write_fd,),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_worker_env(sys_entry),
                cwd=ROOT,
                start_new_session=True,
            )
        os.close(write_fd)
        self.fd = read_fd

    def _limit(self, name: str) -> float:
        w = by_name(name)
        return w.quick_limit_s if self.quick else w.limit_s

    def run(self, progress: Any) -> tuple[str | None, str]:
        """Collect events until the worker exits; ``(workload cut short, why)``."""
        buf = b""
        current: str | None = None
        started = time.monotonic()
        deadline = started + _SETUP_LIMIT_S
        cut: tuple[str | None, str] = (None, "")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                cut = (current, f"timeout after {time.monotonic() - started:.0f} s")
                self._kill()
                break
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                if current is not None:
                    cut = (current, f"worker exited (code {self.proc.poll()}) during it")
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                event = json.loads(line)
                self.events.append(event)
                if event["event"] == "start":
                    current = event["workload"]
                    started = time.monotonic()
                    deadline = started + self._limit(current)
                elif event["event"] == "result":
                    progress(event)
                    current = None
                    deadline = time.monotonic() + _SETUP_LIMIT_S
        os.close(self.fd)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._kill()
            self.proc.wait()
        return cut

    def _kill(self) -> None:
        procfs.end_processes([*procfs.descendants(self.proc.pid), self.proc.pid])


def _run_system(sys_entry: Entry, names: list[str], quick: bool, logs: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"label": sys_entry.label, "status": "ok", "workloads": {}}
    results: dict[str, Any] = out["workloads"]
    if not sys_entry.installed():
        out["status"] = "not installed"
        out["reason"] = f"cannot import {sys_entry.requires}"
        results.update({n: {"status": "not installed"} for n in names})
        return out
    leftovers = 0

    def progress(event: dict[str, Any]) -> None:
        what = (
            event["status"]
            if event["status"] == "ok"
            else f"{event['status']}: {event.get('reason', '')}"
        )
        print(
            f"  {sys_entry.name:14} {event['workload']:22} {event['wall_s']:6.1f} s  {what}",
            file=sys.stderr,
        )

    for group in GROUPS:
        remaining = [n for n in names if by_name(n).group == group]
        while remaining:
            watch = _Watch(sys_entry, remaining, quick, logs / f"{sys_entry.name}-{group}.log")
            cut, why = watch.run(progress)
            for event in watch.events:
                if event["event"] == "hello":
                    out["version"] = event["version"]
                elif event["event"] == "missing":
                    out["status"] = "not installed"
                    out["reason"] = event["reason"]
                    results.update({n: {"status": "not installed"} for n in names})
                    return out
                elif event["event"] == "result":
                    results[event["workload"]] = {
                        k: v for k, v in event.items() if k not in ("event", "workload")
                    }
                elif event["event"] == "bye":
                    leftovers += int(event["leftovers"])
            # Anything the worker left (or that was orphaned when it was killed) is ours now.
            leftovers += len(procfs.end_processes(procfs.children(os.getpid())))
            if cut is None:
                # The worker ended by itself: whatever it did not report, it never started.
                reason = why or f"worker exited with code {watch.proc.returncode}"
                for n in remaining:
                    results.setdefault(n, {"status": "failed", "reason": reason})
                break
            status = "timeout" if why.startswith("timeout") else "crashed"
            results[cut] = {"status": status, "reason": why}
            print(f"  {sys_entry.name:9} {cut:22} {status}: {why}", file=sys.stderr)
            remaining = remaining[remaining.index(cut) + 1 :]
    out["leftover_processes"] = leftovers
    return out


def _merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's results over several rounds: the median of each numeric metric.

    A workload counts only the rounds where it succeeded; each round's metrics stay
    in ``rounds``. With one round this is that round.
    """
    if len(runs) == 1:
        return runs[0]
    merged = {**runs[-1], "workloads": {}}
    merged["leftover_processes"] = sum(r.get("leftover_processes", 0) for r in runs)
    for name, last in runs[-1]["workloads"].items():
        oks = [
            r["workloads"][name] for r in runs if r["workloads"].get(name, {}).get("status") == "ok"
        ]
        if not oks:
            merged["workloads"][name] = last
            continue
        metrics = dict(oks[-1]["metrics"])
        for key, value in metrics.items():
            values = [ok["metrics"].get(key) for ok in oks]
            if isinstance(value, int | float) and not isinstance(value, bool):
                numbers = [v for v in values if isinstance(v, int | float)]
                metrics[key] = statistics.median(numbers)
        merged["workloads"][name] = {
            "status": "ok",
            "metrics": metrics,
            "rounds": [ok["metrics"] for ok in oks],
            "wall_s": sum(ok.get("wall_s", 0.0) for ok in oks),
        }
    return merged


def _text(results: dict[str, Any]) -> str:
    """The table with the machine, the systems' versions and how the run went."""
    table = render(results)
    machine = results["meta"]["machine"]["summary"]
    versions = ", ".join(
        f"{s['label']} {s.get('version', '')}".strip()
        if s["status"] == "ok"
        else f"{s['label']} (not installed)"
        for s in results["systems"].values()
    )
    meta = results["meta"]
    rounds = meta.get("repeat", 1)
    mode = f"{'quick' if meta['quick'] else 'full'} run of {meta['timestamp']}, {meta['wall_s']} s"
    if rounds > 1:
        mode += f", medians of {rounds} rounds"
    if "loadavg_start" in meta:
        mode += f"; 1-min load average {meta['loadavg_start'][0]:.1f} before"
    if "loadavg_end" in meta:
        mode += f", {meta['loadavg_end'][0]:.1f} after"
    return f"Machine: {machine}\n\nSystems: {versions}\n\nMode: {mode}\n\n{table}\n"


def _write(results: dict[str, Any], out_dir: Path, fig_dir: Path, charts: bool) -> str:
    text = _text(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    blob = json.dumps(results, indent=1, sort_keys=False)
    stamp = results["meta"]["timestamp"].replace(":", "").replace("-", "")
    (out_dir / f"{stamp}.json").write_text(blob)
    (out_dir / "latest.json").write_text(blob)
    (out_dir / "latest.md").write_text(text)
    if charts:
        for path in draw(results, fig_dir):
            print(
                f"chart: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}",
                file=sys.stderr,
            )
    return text


def main(argv: list[str] | None = None) -> int:
    """Run the suite (see ``--help``); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer iterations: a ~2 minute smoke test"
    )
    parser.add_argument("--systems", help="comma-separated: " + ",".join(e.name for e in SYSTEMS))
    parser.add_argument(
        "--workloads", help="comma-separated: " + ",".join(w.name for w in WORKLOADS)
    )
    parser.add_argument("--out", type=Path, default=BENCH / "results", help="results directory")
    parser.add_argument("--figures", type=Path, default=BENCH / "figures", help="charts directory")
    parser.add_argument("--no-charts", action="store_true")
    parser.add_argument("--render", type=Path, metavar="JSON", help="only re-render a results file")
    parser.add_argument("--list", action="store_true", help="print the workloads and exit")
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="N", help="N rounds; report each metric's median"
    )
    args = parser.parse_args(argv)

    if args.list:
        print("| workload | unit | what it measures |\n|---|---|---|")
        for w in WORKLOADS:
            units = ", ".join(dict.fromkeys(r.unit for r in w.rows))
            print(f"| `{w.name}` | {units} | {w.description} |")
        return 0

    if args.render:
        loaded = json.loads(args.render.read_text())
        print(_text(loaded))
        if not args.no_charts:
            draw(loaded, args.figures)
        return 0

    systems = [entry(n) for n in args.systems.split(",")] if args.systems else list(SYSTEMS)
    names = (
        [by_name(n).name for n in args.workloads.split(",")]
        if args.workloads
        else [w.name for w in WORKLOADS]
    )
    names = [w.name for w in WORKLOADS if w.name in names]  # catalog order: idle ones first
    procfs.become_subreaper()
    _compile_bytecode()
    results: dict[str, Any] = {
        "meta": {
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "quick": args.quick,
            "argv": sys.argv[1:] if argv is None else argv,
            "machine": _machine(),
        },
        "workloads": names,
        "systems": {},
    }
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for log in logs.glob("*.log"):
        log.unlink()
    results["meta"]["loadavg_start"] = os.getloadavg()
    if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        print(
            f"warning: load average {os.getloadavg()[0]:.1f} already: figures will be noisy",
            file=sys.stderr,
        )
    results["meta"]["repeat"] = args.repeat
    runs: dict[str, list[dict[str, Any]]] = {}
    t0 = time.monotonic()
    try:
        # Whole rounds, so that a burst of load on the machine hits every system alike.
        for round_ in range(args.repeat):
            for sys_entry in systems:
                print(f"{sys_entry.label} (round {round_ + 1}/{args.repeat}):", file=sys.stderr)
                one = _run_system(sys_entry, names, args.quick, logs)
                runs.setdefault(sys_entry.name, []).append(one)
                results["systems"][sys_entry.name] = _merge(runs[sys_entry.name])
    finally:
        results["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
        results["meta"]["loadavg_end"] = os.getloadavg()
        if results["systems"]:
            print(_write(results, args.out, args.figures, not args.no_charts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
