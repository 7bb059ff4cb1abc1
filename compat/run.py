"""Conformance: the programs in ``compat/`` run on actormesh and, as a control, on the peer.

Each program under ``compat/monarch/`` is written in Monarch 0.7's own spelling
(``from monarch.actor import ...``), each under ``compat/ray/`` in the spelling of the Ray
ActorMesh proposal (``from ray.actor_mesh import ActorMesh, method``). A program is run

- on actormesh: a copy with only its import lines rewritten by the fixed table
  ``REWRITES`` below (and nothing else), under the project's interpreter;
- on the peer, as the control: the file itself, unchanged, under the peer's interpreter
  (Monarch: a Python with ``torchmonarch`` 0.7; Ray: a Python with Ray, where the PR's
  module file is made importable as ``ray.actor_mesh`` by a ``sitecustomize.py``).

A program passes when it exits 0 (every program asserts its own results). A program
whose first line is ``# compat: actormesh-only`` uses something only actormesh has (what
the Ray proposal's review asked for); it counts on actormesh and is not run on the peer.

Every run gets ``PYTHONBREAKPOINT=0`` (``debugging.py`` calls ``breakpoint()`` in its
workers), a time limit, and its own launcher (``_launch.py``) that ends, by pid, every
process the program left behind; a Ray program also gets a private ``RAY_TMPDIR`` and
no ``RAY_ADDRESS``, so it starts its own cluster and never joins another.

Usage: ``scripts/compat [--peer monarch|ray] [--monarch-python PATH]
[--ray-pr-module PATH] [--no-control] [--only NAME] [--timeout S] [-v]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ONLY_MARK",
    "PEERS",
    "REWRITES",
    "Outcome",
    "Program",
    "UnmappedImport",
    "discover",
    "main",
    "rewrite",
    "run_on_actormesh",
    "run_on_peer",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LAUNCHER = HERE / "_launch.py"
PEERS = ("monarch", "ray")
ONLY_MARK = "# compat: actormesh-only"
DEFAULT_TIMEOUT_S = 90.0
PR_MODULE_ENV = "ACTORMESH_RAY_PR_MODULE"
MONARCH_PYTHON_ENV = "ACTORMESH_MONARCH_PYTHON"

# The fixed import table, per peer: (pattern, replacement) applied to import lines only.
# ``import monarch.actor`` binds the name ``monarch``, which the program then uses
# (``monarch.actor.unhandled_fault_hook = hook``): the rewritten line binds it to the
# actormesh package, so ``monarch.actor`` is ``actormesh.actor`` and no other line changes.
_MONARCH_MODULES = r"(actor|job|rdma|spmd)"
REWRITES: dict[str, list[tuple[str, str]]] = {
    "monarch": [
        (rf"^(\s*)from monarch\.{_MONARCH_MODULES}(\s+import\b)", r"\1from actormesh.\2\3"),
        (rf"^(\s*)import monarch\.{_MONARCH_MODULES}(\s+as\s+\w+)", r"\1import actormesh.\2\3"),
        (
            rf"^(\s*)import monarch\.{_MONARCH_MODULES}\s*$",
            r"\1import actormesh as monarch, actormesh.\2",
        ),
    ],
    "ray": [
        (r"^(\s*)from ray\.actor_mesh(\s+import\b)", r"\1from actormesh.ray\2"),
    ],
}
# Imports of the peer that the table does not map: a program using one cannot be rewritten.
_PEER_IMPORT = {
    "monarch": re.compile(r"^\s*(from|import)\s+monarch\b"),
    "ray": re.compile(r"^\s*(from\s+ray\.actor_mesh\b|import\s+ray\.actor_mesh\b)"),
}


class UnmappedImport(ValueError):
    """A program imports something of its peer that the rewrite table does not map."""


@dataclass(frozen=True)
class Program:
    """One conformance program."""

    path: Path
    peer: str

    @property
    def name(self) -> str:
        """``peer/file.py``."""
        return f"{self.peer}/{self.path.name}"

    @property
    def actormesh_only(self) -> bool:
        """Whether it uses what only actormesh has (first line ``# compat: actormesh-only``)."""
        with self.path.open() as f:
            return f.readline().strip() == ONLY_MARK


@dataclass
class Outcome:
    """How one run went: ``status`` is ``ok``, ``fail``, ``timeout`` or ``skip``."""

    status: str
    seconds: float = 0.0
    returncode: int | None = None
    output: str = ""
    leftovers: list[str] = field(default_factory=list)
    why: str = ""

    @property
    def ok(self) -> bool:
        """The program exited 0 within its time limit."""
        return self.status == "ok"

    def describe(self) -> str:
        """A short cell for the results table."""
        if self.status == "skip":
            return "skipped"
        text = {"ok": "ok", "timeout": "TIMEOUT"}.get(self.status, f"FAIL rc={self.returncode}")
        if self.leftovers:
            text += f" (+{len(self.leftovers)} left)"
        return f"{text} {self.seconds:5.1f}s"


def discover(peer: str, root: Path = HERE) -> list[Program]:
    """The programs of ``peer`` (``compat/<peer>/*.py``), sorted by name."""
    return [Program(p, peer) for p in sorted((root / peer).glob("*.py"))]


def rewrite(source: str, peer: str) -> str:
    """``source`` with its ``peer`` imports turned into actormesh's, by ``REWRITES`` only.

    Raises:
        UnmappedImport: an import of the peer that the table has no entry for.
    """
    lines = source.splitlines(keepends=True)
    for i, line in enumerate(lines):
        for pattern, replacement in REWRITES[peer]:
            new = re.sub(pattern, replacement, line.rstrip("\n"))
            if new != line.rstrip("\n"):
                lines[i] = new + line[len(line.rstrip("\n")) :]
                break
        else:
            if _PEER_IMPORT[peer].match(line):
                raise UnmappedImport(f"line {i + 1}: no rewrite for {line.strip()!r}")
    return "".join(lines)


def _base_env(ray_tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONBREAKPOINT"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # A cluster of the program's own, never one that is already running.
    env.pop("RAY_ADDRESS", None)
    env["RAY_TMPDIR"] = str(ray_tmp)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def _execute(
    python: str, program: Path, *, workdir: Path, env: dict[str, str], timeout: float
) -> Outcome:
    """Run ``python program`` under the launcher in ``workdir``; its outcome."""
    report = workdir / "launch-report.json"
    log = workdir / "output.log"
    cmd = [sys.executable, str(LAUNCHER), str(report), "--", python, str(program)]
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.send_signal(signal.SIGTERM)  # the launcher ends the program and its processes
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    seconds = time.monotonic() - started
    output = log.read_text(errors="replace")
    try:
        launched = json.loads(report.read_text())
    except (OSError, ValueError):
        launched = {"returncode": None, "leftovers": []}
    leftovers = [f"{p['pid']} {p['cmdline']}" for p in launched["leftovers"]]
    rc = launched["returncode"]
    if timed_out:
        status = "timeout"
    else:
        status = "ok" if rc == 0 else "fail"
    return Outcome(status, seconds, rc, output, leftovers)


def _scratch() -> Path:
    # Short: a Ray cluster puts Unix sockets under RAY_TMPDIR (paths of at most 107 bytes).
    return Path(tempfile.mkdtemp(prefix="amc-"))


def run_on_actormesh(
    program: Program, *, python: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> Outcome:
    """Run a copy of ``program`` with its imports rewritten, under ``python`` (default: the
    project's interpreter, this one)."""
    try:
        source = rewrite(program.path.read_text(), program.peer)
    except UnmappedImport as e:
        return Outcome("fail", output=str(e), why="unmapped import")
    scratch = _scratch()
    try:
        copy = scratch / program.path.name
        copy.write_text(source)
        env = _base_env(scratch / "ray")
        return _execute(python or sys.executable, copy, workdir=scratch, env=env, timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


_SITECUSTOMIZE = '''\
"""Written by compat/run.py: makes the Ray PR's module file importable as ray.actor_mesh."""
import importlib.abc
import importlib.util
import os
import sys


class _ActorMeshFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "ray.actor_mesh":
            return None
        return importlib.util.spec_from_file_location(name, os.environ["{env}"])


sys.meta_path.insert(0, _ActorMeshFinder())
'''


def run_on_peer(
    program: Program,
    *,
    python: str,
    pr_module: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Outcome:
    """Run ``program`` unchanged under the peer's ``python``; for Ray, with ``pr_module``
    importable as ``ray.actor_mesh``."""
    scratch = _scratch()
    try:
        env = _base_env(scratch / "ray")
        if program.peer == "ray":
            if pr_module is None:
                return Outcome("skip", why="no PR module")
            site = scratch / "site"
            site.mkdir()
            (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(env=PR_MODULE_ENV))
            env[PR_MODULE_ENV] = str(Path(pr_module).resolve())
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(site), env.get("PYTHONPATH", "")) if p
            )
        return _execute(python, program.path, workdir=scratch, env=env, timeout=timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _imports(python: str, module: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def find_monarch_python(given: str | None) -> tuple[str | None, str]:
    """The interpreter for the Monarch control and where it came from, or None and why."""
    if given:
        return given, "--monarch-python"
    if os.environ.get(MONARCH_PYTHON_ENV):
        return os.environ[MONARCH_PYTHON_ENV], MONARCH_PYTHON_ENV
    # bench/requirements.txt installs torchmonarch next to actormesh, or in a venv of its own.
    candidates = [
        (REPO / "bench" / ".venv" / "bin" / "python", "bench/.venv"),
        (Path(sys.executable), "the project venv, torchmonarch from bench/requirements.txt"),
    ]
    for candidate, where in candidates:
        if candidate.exists() and _imports(str(candidate), "monarch.actor"):
            return str(candidate), where
    return None, (
        "no Python with torchmonarch 0.7 found (pass --monarch-python PATH, set "
        f"{MONARCH_PYTHON_ENV}, or pip install -r bench/requirements.txt)"
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _tail(text: str, lines: int = 15) -> str:
    kept = _ANSI.sub("", text).rstrip().splitlines()[-lines:]
    return "\n".join("      | " + line for line in kept)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); 1 when a program fails on actormesh."""
    parser = argparse.ArgumentParser(prog="scripts/compat", description=__doc__.splitlines()[0])
    parser.add_argument("--peer", choices=PEERS, action="append", help="only this peer")
    parser.add_argument("--monarch-python", help="Python with torchmonarch 0.7 (control)")
    parser.add_argument(
        "--ray-pr-module",
        default=os.environ.get(PR_MODULE_ENV),
        help=f"the Ray PR's actor_mesh.py, for the control (or ${PR_MODULE_ENV})",
    )
    parser.add_argument("--ray-python", default=sys.executable, help="Python with Ray")
    parser.add_argument("--no-control", action="store_true", help="run on actormesh only")
    parser.add_argument("--only", action="append", help="only programs whose name contains this")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per run")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every output")
    args = parser.parse_args(argv)

    failed_on_actormesh = 0
    for peer in args.peer or PEERS:
        programs = [
            p for p in discover(peer) if not args.only or any(s in p.name for s in args.only)
        ]
        if not programs:
            continue
        skip_why = label = ""
        peer_python: str | None = None
        if args.no_control:
            skip_why = "--no-control"
        elif peer == "monarch":
            peer_python, where = find_monarch_python(args.monarch_python)
            skip_why = "" if peer_python else where
            label = f"Monarch control: {peer_python} ({where})" if peer_python else ""
        else:
            peer_python = args.ray_python
            if not args.ray_pr_module:
                skip_why = f"no PR module (pass --ray-pr-module PATH or set ${PR_MODULE_ENV})"
            elif not Path(args.ray_pr_module).is_file():
                skip_why = f"the PR module {args.ray_pr_module} is not a file"
            elif not _imports(peer_python, "ray"):
                skip_why = f"{peer_python} cannot import ray (pass --ray-python PATH)"
            label = f"Ray control: {peer_python} with ray.actor_mesh = {args.ray_pr_module}"
        print(f"== {peer}: {len(programs)} programs")
        print(f"   actormesh: {sys.executable} (imports rewritten by compat/run.py REWRITES)")
        print(f"   {label}" if not skip_why else f"   peer control skipped: {skip_why}")
        passed = control_ok = control_run = only = 0
        for program in programs:
            mine = run_on_actormesh(program, timeout=args.timeout)
            if program.actormesh_only:
                only += 1
                theirs = Outcome("skip", why="actormesh-only")
            elif skip_why or peer_python is None:
                theirs = Outcome("skip", why=skip_why)
            else:
                theirs = run_on_peer(
                    program, python=peer_python, pr_module=args.ray_pr_module, timeout=args.timeout
                )
                control_run += 1
            passed += mine.ok
            control_ok += theirs.ok
            peer_cell = "n/a (actormesh-only)" if program.actormesh_only else theirs.describe()
            print(
                f"{program.name:<34} actormesh: {mine.describe():<22} {peer}: {peer_cell}",
                flush=True,
            )
            for who, outcome in (("actormesh", mine), (peer, theirs)):
                if outcome.status == "skip":
                    continue
                if args.verbose or not outcome.ok:
                    print(f"    {who} output{' (tail)' if not args.verbose else ''}:")
                    print(_tail(outcome.output, 10**6 if args.verbose else 15))
                for leftover in outcome.leftovers:
                    print(f"    {who}: ended a leftover process: {leftover}")
        failed_on_actormesh += len(programs) - passed
        total = len(programs)
        if skip_why:
            control = "skipped, see above"
        elif only:
            control = f"{control_ok}/{control_run}; {only} actormesh-only"
        else:
            control = f"{control_ok}/{control_run}"
        print(f"{passed}/{total} run on actormesh (peer control: {control})")
        print()
    return 1 if failed_on_actormesh else 0


if __name__ == "__main__":
    sys.exit(main())
