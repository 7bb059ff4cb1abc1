"""Running one side: a copy of Monarch's tests in a scratch folder, one file at a time.

Each file runs as ``PYTHON -m pytest tests/FILE`` under compat/_launch.py (a child
subreaper that ends, by pid, every process the run leaves behind), with the recorder
plugin. A watchdog ends a run whose current test outlives its pytest-timeout by a
minute; a run that dies mid-test (crash, watchdog) is started again without the tests
already done, so one bad test never costs the rest of its file.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from .selection import ALIASES, MAPPED_MODULES, UNMAPPED_SUBMODULES

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LAUNCHER = REPO / "compat" / "_launch.py"
SHIM = HERE / "shim"
SHIM_FILES = ("conftest.py", "rdma_test_utils.py", "proc_mesh_test_utils.py")
MONARCH_PYTHON_ENV = "ACTORMESH_MONARCH_PYTHON"
DEFAULT_MONARCH_VENV = REPO / ".venv-monarch"
SUITE_DEPS = REPO / ".venv-monarch-suite-deps"  # pytest-asyncio for the actormesh side
PYTEST_ASYNCIO = "pytest-asyncio==1.5.0"
_WATCHDOG_GRACE_S = 60.0
_MAX_RESTARTS = 25

Record = dict[str, Any]


# -- where the tests come from ---------------------------------------------------------


def resolve_tests(path: Path, scratch: Path) -> tuple[Path, str]:
    """The folder of Monarch's test files that ``path`` names, and how it was found.

    ``path`` is a Monarch checkout (its ``python/tests``), a folder of test files, or a
    torchmonarch wheel (its top-level ``tests/``, extracted into ``scratch``).
    """
    if path.is_file() and path.suffix == ".whl":
        target = scratch / "wheel"
        with zipfile.ZipFile(path) as wheel:
            members = [n for n in wheel.namelist() if n.startswith("tests/")]
            if not members:
                raise SystemExit(f"{path}: the wheel has no top-level tests/ folder")
            wheel.extractall(target, members)
        return target / "tests", f"the tests/ folder of the wheel {path.name}"
    if (path / "python" / "tests").is_dir():
        return path / "python" / "tests", f"the Monarch checkout {path} (python/tests)"
    if path.is_dir() and any(path.glob("test_*.py")):
        return path, f"the folder of test files {path}"
    raise SystemExit(
        f"{path}: not a Monarch checkout (no python/tests), a folder of test_*.py files "
        "or a torchmonarch wheel"
    )


# -- the interpreters ------------------------------------------------------------------


def _version(package: str) -> str:
    return importlib.metadata.version(package)


def monarch_requirements() -> list[str]:
    """What the control's venv gets: Monarch 0.7.0 on the CPU torch the project pins,
    and the same pytest and plugins as the actormesh side."""
    return [
        "torch==2.13.0",  # the local CPU wheel; a looser spec pulls a CUDA build
        "torchmonarch==0.7.0",
        "torchx==0.7.0",  # monarch._src.job.spmd imports it (test_spmd.py)
        f"pytest=={_version('pytest')}",
        f"pytest-timeout=={_version('pytest-timeout')}",
        PYTEST_ASYNCIO,
        f"cloudpickle=={_version('cloudpickle')}",
    ]


def _can_import(python: str, modules: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", f"import {modules}"], capture_output=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def monarch_python(given: str | None) -> tuple[str, str]:
    """The control's interpreter and where it came from; creates .venv-monarch if need be."""
    if given:
        return given, "--monarch-python"
    if os.environ.get(MONARCH_PYTHON_ENV):
        return os.environ[MONARCH_PYTHON_ENV], f"${MONARCH_PYTHON_ENV}"
    python = DEFAULT_MONARCH_VENV / "bin" / "python"
    stamp = DEFAULT_MONARCH_VENV / "monarch-suite-requirements.txt"
    wanted = "\n".join(monarch_requirements()) + "\n"
    needed = "monarch.actor, pytest_timeout, pytest_asyncio, cloudpickle, torchx"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python), f"{DEFAULT_MONARCH_VENV.name} (reused)"
    print(f"== creating {DEFAULT_MONARCH_VENV} with {' '.join(monarch_requirements())}")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DEFAULT_MONARCH_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *monarch_requirements()], check=True)
    if not _can_import(str(python), needed):
        raise SystemExit(f"{python} cannot import {needed} after installing")
    stamp.write_text(wanted)
    return str(python), f"{DEFAULT_MONARCH_VENV.name} (created)"


def actormesh_extra_path() -> list[str]:
    """Folders the actormesh side adds to PYTHONPATH for the test plugins it lacks."""
    if _can_import(sys.executable, "pytest_asyncio, pytest_timeout, cloudpickle"):
        return []
    marker = SUITE_DEPS / "pytest_asyncio"
    if not marker.exists():
        print(f"== installing {PYTEST_ASYNCIO} into {SUITE_DEPS}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(SUITE_DEPS),
                PYTEST_ASYNCIO,
            ],
            check=True,
        )
    return [str(SUITE_DEPS)]


# -- one side --------------------------------------------------------------------------


_INI = """\
[pytest]
# As Monarch's pyproject.toml: asyncio tests run without a marker.
asyncio_mode = auto
markers =
    oss_skip: marks tests to skip in OSS CI
timeout = {timeout}
timeout_method = signal
"""


def prepare(side: str, tests: Path, root: Path, timeout: float) -> Path:
    """The side's folder: a copy of the tests (with the shim on the actormesh side), the
    recorder plugin, a pytest.ini, and for actormesh the import mapping."""
    folder = root / side
    shutil.copytree(tests, folder / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "plugins").mkdir()
    shutil.copy(HERE / "recorder.py", folder / "plugins" / "monarch_suite_recorder.py")
    (folder / "pytest.ini").write_text(_INI.format(timeout=timeout))
    (folder / "tmp").mkdir()
    if side == "actormesh":
        for name in SHIM_FILES:
            shutil.copy(SHIM / name, folder / "tests" / name)
        (folder / "site").mkdir()
        shutil.copy(SHIM / "sitecustomize.py", folder / "site" / "sitecustomize.py")
        mapping = {
            "modules": MAPPED_MODULES,
            "aliases": {f"{m}:{n}": public for (m, n), public in ALIASES.items()},
            "unmapped": sorted(UNMAPPED_SUBMODULES),
        }
        (folder / "site" / "mapping.json").write_text(json.dumps(mapping, indent=1))
    return folder


def _environment(side: str, folder: Path, extra_path: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    path = [*extra_path, str(folder / "plugins"), str(folder / "tests")]
    if side == "actormesh":
        path.insert(0, str(folder / "site"))
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONBREAKPOINT="0",
        PYTHONUNBUFFERED="1",
        TMPDIR=str(folder / "tmp"),
        LC_ALL="C",  # as Monarch's CI
    )
    return env


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _short(nodeid: str) -> str:
    return nodeid.removeprefix("tests/")


def run_file(
    python: str,
    side: str,
    folder: Path,
    name: str,
    deselect: list[str],
    timeout: float,
    extra_path: list[str],
    pytest_args: list[str],
) -> tuple[dict[str, Record], Record]:
    """Run one test file to the end; its tests' records and the file's own."""
    env = _environment(side, folder, extra_path)
    done: dict[str, Record] = {}
    info: Record = {"runs": 0, "leftovers": 0, "collect_error": None}
    started = time.monotonic()
    while info["runs"] <= _MAX_RESTARTS:
        info["runs"] += 1
        run_id = f"{name}.{info['runs']}"
        record = folder / f"{run_id}.jsonl"
        skip_file = folder / f"{run_id}.deselect.json"
        skip_file.write_text(json.dumps(deselect + [f"tests/{k}" for k in done]))
        env["MONARCH_SUITE_RECORD"] = str(record)
        env["MONARCH_SUITE_DESELECT"] = str(skip_file)
        command = [
            python, "-m", "pytest", f"tests/{name}", "-q", "-rN", "-p", "no:cacheprovider",
            "-p", "monarch_suite_recorder", "-m", "not oss_skip", *pytest_args,
        ]  # fmt: skip
        report = folder / f"{run_id}.launch.json"
        log = folder / f"{run_id}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(LAUNCHER), str(report), "--", *command],
                cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                killed = _watch(proc, record, timeout)
            except BaseException:  # Ctrl-C or SIGTERM: the launcher ends what it started
                proc.send_signal(signal.SIGTERM)
                proc.wait()
                raise
        events = _events(record)
        try:
            launched = json.loads(report.read_text())
        except (OSError, ValueError):
            launched = {"returncode": None, "leftovers": []}
        info["leftovers"] += len(launched["leftovers"])
        collected: list[str] = []
        running: str | None = None
        for event in events:
            kind = event["event"]
            if kind == "collected":
                collected = [_short(n) for n in event["nodeids"]]
            elif kind == "collect_error":
                info["collect_error"] = event["error"]
                info["collect_detail"] = event.get("detail", "")
            elif kind == "start":
                running = _short(event["nodeid"])
            elif kind == "result":
                key = _short(event["nodeid"])
                done[key] = {k: v for k, v in event.items() if k not in ("event", "nodeid")}
                if running == key:
                    running = None
        if running is not None:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            if killed:
                error = (
                    f"hung: killed by the runner {timeout + _WATCHDOG_GRACE_S:.0f}s after "
                    "the test started (pytest-timeout could not interrupt it)"
                )
            else:
                rc = launched["returncode"]
                error = f"the pytest process died during the test (exit {rc}): {tail[-300:]}"
            done[running] = {
                "outcome": "failed", "error": error, "detail": tail,
                "seconds": None, "timeout": killed,
            }  # fmt: skip
        remaining = [k for k in collected if k not in done]
        if running is None or not remaining:
            for key in remaining:  # should not happen: collected but never started
                done[key] = {"outcome": "not run", "error": "collected but never run"}
            break
    info["seconds"] = round(time.monotonic() - started, 1)
    return done, info


def _watch(proc: subprocess.Popen[bytes], record: Path, timeout: float) -> bool:
    """Wait for ``proc``; end it (True) when no test finished for timeout + grace."""
    last = time.monotonic()
    size = -1
    while proc.poll() is None:
        time.sleep(1.0)
        with contextlib.suppress(OSError):
            now_size = record.stat().st_size
            if now_size != size:
                size, last = now_size, time.monotonic()
        if time.monotonic() - last > timeout + _WATCHDOG_GRACE_S:
            proc.send_signal(signal.SIGTERM)  # the launcher ends pytest and its processes
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return True
    return False


def _sweep(root: Path) -> list[int]:
    """End (SIGKILL, by pid) every process still running with ``root`` in its working
    folder or environment: whatever escaped the launcher, so the run leaves nothing."""
    marker = str(root).encode()
    ended = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if cwd.startswith(str(root)) or marker in environ:
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)
                ended.append(int(entry.name))
    return ended


def run_side(
    side: str,
    python: str,
    tests: Path,
    files: list[str],
    deselect: dict[str, list[str]],
    timeout: float,
    pytest_args: list[str],
    keep: Path | None,
    actormesh_src: Path | None = None,
) -> Record:
    """Run ``files`` on one side; the side's record (see the package docstring).

    ``actormesh_src`` (actormesh side): a folder holding an ``actormesh`` package to
    test instead of the one the project's Python imports (say, a snapshot of a commit).
    """
    root = Path(tempfile.mkdtemp(prefix=f"ms-{side[:3]}-"))
    extra = actormesh_extra_path() if side == "actormesh" else []
    if side == "actormesh" and actormesh_src is not None:
        extra.insert(0, str(actormesh_src.resolve()))
    folder = prepare(side, tests, root, timeout)
    record: Record = {
        "side": side, "python": python, "tests": {}, "files": {},
        "timeout": timeout, "pytest_args": pytest_args,
        "actormesh_src": str(actormesh_src) if actormesh_src else None,
    }  # fmt: skip
    started = time.monotonic()
    print(f"== {side}: {python}, {len(files)} files, {timeout:.0f}s per test", flush=True)
    try:
        for name in files:
            keys = [f"tests/{name}::{k}" for k in deselect.get(name, [])]
            tests_done, info = run_file(
                python, side, folder, name, keys, timeout, extra, pytest_args
            )
            record["tests"].update(tests_done)
            record["files"][name] = info
            counts: dict[str, int] = {}
            for r in tests_done.values():
                counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
            summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no tests"
            extra_note = (
                f"; collection error: {info['collect_error']}" if info["collect_error"] else ""
            )
            ended = f", {info['leftovers']} leftover processes ended" if info["leftovers"] else ""
            print(
                f"   {name:<44} {summary} ({info['seconds']:.0f}s, {info['runs']} run(s)"
                f"{ended}){extra_note}",
                flush=True,
            )
    finally:
        swept = _sweep(root)
        if swept:
            print(f"   ended {len(swept)} process(es) left from this side: {swept}", flush=True)
        record["wall_s"] = round(time.monotonic() - started, 1)
        if keep is not None:
            logs = keep / f"{side}-logs"
            shutil.rmtree(logs, ignore_errors=True)
            shutil.copytree(
                folder, logs, ignore=shutil.ignore_patterns("tests", "tmp", "site", "plugins")
            )
        shutil.rmtree(root, ignore_errors=True)
    return record
