"""The command line of ``scripts/monarch-suite`` (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import __doc__ as _DOC
from .report import summarize, unclassified
from .runner import monarch_python, resolve_tests, run_side
from .selection import FILES, analyse


def _load(path: Path | None) -> dict[str, Any]:
    return json.loads(path.read_text()) if path else {}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the sides asked for and print the comparison; 0 when the target is met."""
    parser = argparse.ArgumentParser(
        prog="scripts/monarch-suite",
        description=(_DOC or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", type=Path, help="Monarch checkout, folder of tests, or wheel")
    parser.add_argument("--side", choices=("both", "actormesh", "monarch"), default="both")
    parser.add_argument("--monarch-python", help="Python with torchmonarch 0.7.0 (control)")
    parser.add_argument("--control", type=Path, help="Monarch's record from an earlier run")
    parser.add_argument("--mine", type=Path, help="actormesh's record from an earlier run")
    parser.add_argument("--keep", type=Path, help="save each side's record and logs here")
    parser.add_argument("--only", action="append", help="only files whose name contains this")
    parser.add_argument(
        "--actormesh-src",
        type=Path,
        help="a folder with the actormesh package to test (default: the project's)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    args, pytest_args = parser.parse_known_args(argv)
    pytest_args = [a for a in pytest_args if a != "--"]

    # SIGTERM unwinds like Ctrl-C, so the runs in flight end and the scratch goes.
    signal.signal(signal.SIGTERM, _interrupt)
    scratch = Path(tempfile.mkdtemp(prefix="ms-src-"))
    try:
        return _run(args, pytest_args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(args: argparse.Namespace, pytest_args: list[str], scratch: Path) -> int:
    tests, where = resolve_tests(args.path.resolve(), scratch)
    available = sorted(p.name for p in tests.glob("test_*.py"))
    files = [f for f in FILES if f in available]
    if args.only:
        files = [f for f in files if any(s in f for s in args.only)]
    static = analyse(tests)
    deselect = {f: sorted(t) for f, t in static.items()}
    print(f"== Monarch's tests: {where}")
    print(f"   {len(files)} files selected; {sum(len(t) for t in static.values())} tests "
          "of them reach Monarch internals and are not run")  # fmt: skip
    for name in unclassified(available):
        print(f"   unclassified test file (add it to FILES or EXCLUDED): {name}")
    missing = [f for f in FILES if f not in available]
    if missing:
        print(f"   selected files absent from PATH: {', '.join(missing)}")

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    control, mine = _load(args.control), _load(args.mine)
    times: dict[str, float] = {}
    if args.side in ("both", "monarch") and not args.control:
        python, how = monarch_python(args.monarch_python)
        print(f"== Monarch control: {python} ({how})")
        control = run_side("monarch", python, tests, files, deselect, args.timeout,
                           pytest_args, args.keep)  # fmt: skip
        times["monarch"] = control["wall_s"]
        if args.keep:
            (args.keep / "monarch.json").write_text(json.dumps(control, indent=1))
    if args.side in ("both", "actormesh") and not args.mine:
        mine = run_side("actormesh", sys.executable, tests, files, deselect, args.timeout,
                        pytest_args, args.keep, args.actormesh_src)  # fmt: skip
        times["actormesh"] = mine["wall_s"]
        if args.keep:
            (args.keep / "actormesh.json").write_text(json.dumps(mine, indent=1))

    only = set(files) if args.only or pytest_args else None
    static_shown = {f: t for f, t in static.items() if f in files}
    lines, ok = summarize(mine, control, static_shown, only)
    print()
    print("\n".join(lines))
    if times:
        print()
        print("wall time: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in times.items()))
    return 0 if ok else 1
