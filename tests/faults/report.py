"""Run the fault suite and print its table: ``python -m tests.faults.report [--full]``.

The short form (the default, also run by ``scripts/test``) takes about a minute on two
cores; ``--full`` adds the 15-second GIL hold and a 30-second chaos run. Extra arguments
go to pytest (``-k chaos``, ``-x``). The exit status is non-zero when a scenario failed or
any figure that must be zero is not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def run_suite(full: bool, pytest_args: list[str]) -> tuple[dict[str, Any], float, int]:
    """Run tests/faults under pytest; its per-test records, wall time and exit code."""
    with tempfile.TemporaryDirectory(prefix="actormesh-faults-") as scratch:
        target = Path(scratch) / "report.json"
        env = {**os.environ, "ACTORMESH_FAULT_REPORT": str(target)}
        if full:
            env["ACTORMESH_FAULTS_FULL"] = "1"
        command = [sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider"]
        started = time.monotonic()
        code = subprocess.run([*command, *pytest_args], cwd=REPO, env=env, check=False)
        took = time.monotonic() - started
        records = json.loads(target.read_text()) if target.exists() else {}
    return records, took, code.returncode


def _figures(records: dict[str, Any], name: str) -> list[float]:
    return [v for r in records.values() for v in r.get("figures", {}).get(name, [])]


def _leaks(records: dict[str, Any], kind: str) -> int:
    return sum(len(r.get("leaks", {}).get(kind, [])) for r in records.values())


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"{statistics.median(values) * 1000:.0f} ms / {max(values) * 1000:.0f} ms"
        f"  (n={len(values)})"
    )


def _count(values: list[float]) -> str:
    return "n/a (not run)" if not values else f"{int(sum(values))}"


def summarize(records: dict[str, Any], took: float, full: bool) -> tuple[str, bool]:
    """The table, and whether every figure is as it must be."""
    ran = {k: r for k, r in records.items() if "skipped" not in r.get("phases", {}).values()}
    passed = [
        k
        for k, r in ran.items()
        if r.get("phases", {}).get("call") == "passed"
        and all(outcome != "failed" for outcome in r.get("phases", {}).values())
    ]
    hangs = sum(1 for r in ran.values() if r.get("hang"))
    leaks = {kind: _leaks(ran, kind) for kind in ("orphans", "zombies", "shm", "fds", "files")}
    lost = _figures(ran, "lost")
    duplicated = _figures(ran, "duplicated")
    order = _figures(ran, "order_violations")
    rows = [
        ("scenarios passed", f"{len(passed)}/{len(ran)}"),
        ("hangs", str(hangs)),
        ("orphan processes", str(leaks["orphans"])),
        ("zombie processes", str(leaks["zombies"])),
        ("leaked shared-memory segments", str(leaks["shm"])),
        ("leaked file descriptors", str(leaks["fds"])),
        ("files left on disk", str(leaks["files"])),
        ("death detection, median / max", _ms(_figures(ran, "detect_s"))),
        ("frozen-worker detection (timeout 1 s)", _ms(_figures(ran, "frozen_detect_s"))),
        ("rank restart, median / max", _ms(_figures(ran, "restart_s"))),
        ("cleanup after controller death, med / max", _ms(_figures(ran, "orphan_cleanup_s"))),
        ("workers joined under a pre-auth flood, med / max", _ms(_figures(ran, "preauth_join_s"))),
        ("rpc rendezvous under a pre-auth flood", _ms(_figures(ran, "preauth_rendezvous_s"))),
        ("slow-drip client dropped after", _ms(_figures(ran, "slowdrip_dropped_s"))),
        ("acknowledged calls lost", _count(lost)),
        ("acknowledged calls duplicated", _count(duplicated)),
        ("order violations", _count(order)),
        (
            "chaos: kills / acked calls / died in flight",
            " / ".join(
                _count(_figures(ran, name)) for name in ("chaos_kills", "chaos_acked", "chaos_died")
            ),
        ),
    ]
    form = "full" if full else "short"
    width = max(len(label) for label, _ in rows)
    lines = [f"actormesh fault suite ({form} form, {os.cpu_count()} cores, {took:.0f} s)"]
    lines += [f"  {label:<{width}}  {value}" for label, value in rows]
    ok = (
        len(ran) > 0
        and len(passed) == len(ran)
        and hangs == 0
        and not any(leaks.values())
        and all(sum(v) == 0 for v in (lost, duplicated, order))
    )
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the long form (15 s GIL, 30 s chaos)")
    args, pytest_args = parser.parse_known_args(argv)
    records, took, code = run_suite(args.full, pytest_args)
    table, ok = summarize(records, took, args.full)
    print()
    print(table)
    return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
