"""Run torch's RPC suites on actormesh and on torch, and print the comparison.

``python -m tests.torch_suite.report`` (what ``scripts/torch-suite`` runs) runs the full
selection twice, one test at a time: on torch.distributed.rpc with TensorPipe (the
control) and on actormesh.rpc. It prints ``P/N passed (torch: C/N)``, where N counts the
tests of the selection that the harness does not skip, then the failures by cause: a
test that fails on torch too is not held against actormesh; every other failure is
listed under its known reason (``torch_suite_harness.DIFFERENCES``) or as unexplained,
with its error. The exit status is 0 when every test that passes on torch passes on
actormesh, or only known differences fail.

Options: ``--backend actormesh`` or ``--backend torch`` runs one side only (the other
side's figures then come from ``--control FILE``, a record kept from an earlier run with
``--keep DIR``); further arguments go to pytest (``-k rref``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

Records = dict[str, dict[str, Any]]


def run_backend(backend: str, pytest_args: list[str], keep: Path | None) -> tuple[Records, float]:
    """Run the full selection on ``backend``; its per-test records and wall time."""
    target = (keep or Path("/tmp")) / f"torch-suite-{backend}-{os.getpid()}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "ACTORMESH_TORCH_SUITE": "full",
        "ACTORMESH_TORCH_SUITE_BACKEND": backend,
        "ACTORMESH_TORCH_SUITE_RECORD": str(target),
    }
    command = [sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider"]
    print(f"== {backend}: {' '.join(command[2:] + pytest_args)}", flush=True)
    started = time.monotonic()
    done = subprocess.run([*command, *pytest_args], cwd=REPO, env=env, check=False)
    took = time.monotonic() - started
    records: Records = json.loads(target.read_text()) if target.exists() else {}
    if keep is None:
        target.unlink(missing_ok=True)
    if done.returncode not in (0, 1):
        print(f"== {backend}: pytest exited with {done.returncode}", flush=True)
    return records, took


def summarize(mine: Records, control: Records) -> tuple[list[str], bool]:
    """The report's lines, and whether actormesh is as good as torch on the selection."""
    from torch_suite_harness import DIFFERENCES, SKIPS, skip_reason

    skips = _skip_keys()
    names = sorted(set(mine) | set(control) | skips)
    skipped = {n for n in names if n in skips}
    selection = [n for n in names if n not in skipped]
    passed = [n for n in selection if _outcome(mine, n) == "passed"]
    passed_torch = [n for n in selection if _outcome(control, n) == "passed"]
    both = [n for n in passed_torch if _outcome(mine, n) == "passed"]
    lines = [
        f"{len(passed)}/{len(selection)} passed (torch: {len(passed_torch)}/{len(selection)})",
        "",
        f"of the {len(passed_torch)} tests torch passes here, actormesh passes {len(both)} "
        f"({100 * len(both) / max(len(passed_torch), 1):.1f}%)",
    ]
    causes: dict[str, list[str]] = defaultdict(list)
    for name in selection:
        if _outcome(mine, name) == "passed":
            continue
        if _outcome(control, name) != "passed":
            causes["fails on torch too (not counted)"].append(name)
            continue
        test = name.split(".", 1)[1]
        reason = DIFFERENCES.get(name) or DIFFERENCES.get(f"*.{test}")
        if reason is None:
            record = mine.get(name, {})
            error = record.get("error") or record.get("outcome", "not run")
            reason = f"unexplained: {'timeout: ' if record.get('timeout') else ''}{error}"
        causes[reason].append(name)
    if causes:
        lines += ["", "failures by cause:"]
        for reason, tests in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"  {len(tests):4d}  {reason}")
            lines += [f"          {t}" for t in tests]
    by_reason: dict[str, int] = defaultdict(int)
    for name in skipped:
        suite, test = name.split(".", 1)
        by_reason[str(skip_reason(suite, test))] += 1
    lines += ["", f"skipped on both backends ({len(skipped)}):"]
    lines += [f"  {count:4d}  {reason}" for reason, count in sorted(by_reason.items())]
    unknown = sorted(set(SKIPS) - _matching_keys(names))
    if unknown:
        lines += ["", "skip-table entries that match no test: " + ", ".join(unknown)]
    unexplained = any(r.startswith("unexplained") for r in causes)
    return lines, not unexplained


def _outcome(records: Records, name: str) -> str:
    return str(records.get(name, {}).get("outcome", "not run"))


def _skip_keys() -> set[str]:
    from torch_suite_harness import SUITES, skip_reason

    return {
        f"{suite}.{test}"
        for suite, cls in SUITES.items()
        for test in dir(cls)
        if test.startswith("test_") and skip_reason(suite, test) is not None
    }


def _matching_keys(names: list[str]) -> set[str]:
    from torch_suite_harness import SKIPS

    tests = {n.split(".", 1)[1] for n in names} | {n.split(".", 1)[1] for n in _skip_keys()}
    full = set(names) | _skip_keys()
    return {k for k in SKIPS if k in full or (k.startswith("*.") and k[2:] in tests)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("both", "actormesh", "torch"), default="both")
    parser.add_argument("--control", type=Path, help="torch's record from an earlier run")
    parser.add_argument("--mine", type=Path, help="actormesh's record from an earlier run")
    parser.add_argument("--keep", type=Path, help="keep each run's record in this folder")
    args, pytest_args = parser.parse_known_args(argv)
    times: dict[str, float] = {}
    control: Records = json.loads(args.control.read_text()) if args.control else {}
    mine: Records = json.loads(args.mine.read_text()) if args.mine else {}
    if args.backend in ("both", "torch") and not args.control:
        control, times["torch"] = run_backend("torch", pytest_args, args.keep)
    if args.backend in ("both", "actormesh") and not args.mine:
        mine, times["actormesh"] = run_backend("actormesh", pytest_args, args.keep)
    lines, ok = summarize(mine, control)
    print()
    print("\n".join(lines))
    if times:
        print()
        print("run times: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in times.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
