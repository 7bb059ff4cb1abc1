"""Helpers of the fault suite: watching the process table, running controller programs.

``ProcessWatch`` finds every process a test started, however it got there: each test runs
with a fresh ``ACTORMESH_FAULT_TAG`` in the environment, which every worker, every process
an actor starts, and every controller program inherits. A sampler thread walks this
process' descendants while the test runs (so it sees processes that later escape the
tree) and a scan of the whole process table at the end finds the rest. After the test, a
recorded process still running is an orphan; one left as a zombie with a live parent is a
zombie nobody reaps.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actormesh._transport._shm import mappings, pool
from actormesh.testing import shm_segments as held_segments

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TAG = "ACTORMESH_FAULT_TAG"
_SAMPLE_S = 0.05


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def stat_fields(pid: int) -> list[bytes]:
    """Fields of ``/proc/<pid>/stat`` after the command (0: state, 1: parent); [] if gone."""
    data = _read(f"/proc/{pid}/stat")
    return data.rsplit(b")", 1)[1].split() if data else []


def state_of(pid: int) -> str | None:
    """One-letter process state (``R``, ``S``, ``T``, ``Z``...), None once gone."""
    fields = stat_fields(pid)
    return fields[0].decode() if fields else None


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie counts as gone: it runs nothing)."""
    return state_of(pid) in (None, "Z", "X")


def children(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            found.extend(int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split())
    return found


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def tagged(tag: str) -> list[int]:
    """Every process whose environment carries ``ACTORMESH_FAULT_TAG=tag``."""
    wanted = f"{TAG}={tag}".encode()
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and wanted in _read(f"/proc/{entry}/environ").split(b"\0")
    ]


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait (on pidfds, no polling) until ``pids`` have exited; returns those still running."""
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            fds[os.pidfd_open(pid)] = pid
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        pending = set(fds)
        deadline = time.monotonic() + timeout
        while pending and (left := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(left * 1000):
                pending.discard(fd)
                poller.unregister(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return [pid for pid in pids if not gone(pid)]


def open_fds() -> dict[int, str]:
    """This process' open descriptors and what they point to."""
    found = {}
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found[int(entry)] = os.readlink(f"/proc/self/fd/{entry}")
    return found


def shm_segments() -> dict[int, str]:
    """actormesh's shared-memory segments this process holds, by inode, each with how.

    Segments are memory files (``memfd_create``), never named in ``/dev/shm``: they show
    as descriptors (``/proc/<pid>/fd``) and mappings (``/proc/<pid>/maps``), see
    ``actormesh.testing.shm_segments``. Only this process (the controller, which outlives
    every test) is looked at: a segment dies with the last process that holds it, and a
    test's processes have all exited when it is checked (else they count as orphans). A
    segment the controller lent to a worker and never got back or dropped shows here.
    Left out: the ones it keeps on purpose, bounded, for reuse: idle in its pool, or
    mapped in its cache of received segments.
    """
    kept = _kept_by_design()
    return {
        inode: f"memfd inode {inode}: {', '.join(how)}"
        for inode, how in held_segments().items()
        if inode not in kept
    }


def _kept_by_design() -> set[int]:
    with pool._lock:
        idle = {segment.inode for segment in pool._idle}
    with mappings._lock:
        cached = {inode for inode, entry in mappings._by_inode.items() if not entry.busy}
    return idle | cached


def socket_files() -> set[str]:
    """What actormesh could leave in the temporary directory (socket directories)."""
    return {str(p) for p in Path(tempfile.gettempdir()).glob("actormesh-*")}


@dataclass
class Leaks:
    """What a test left behind."""

    orphans: list[str] = field(default_factory=list)
    zombies: list[str] = field(default_factory=list)
    fds: list[str] = field(default_factory=list)
    shm: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def total(self) -> int:
        return sum(len(found) for found in self.__dict__.values())


class ProcessWatch:
    """Records the processes of one test; see the module docstring."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="fault-watch", daemon=True)
        self._wanted = f"{TAG}={tag}".encode()

    def start(self) -> None:
        self._thread.start()

    def _note(self, pid: int) -> None:
        if pid in self.seen:
            return
        if self._wanted in _read(f"/proc/{pid}/environ").split(b"\0"):
            cmd = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")
            self.seen[pid] = cmd.strip()

    def _sample(self) -> None:
        me = os.getpid()
        while not self._stop.wait(_SAMPLE_S):
            for pid in descendants(me):
                self._note(pid)

    def finish(self, grace: float) -> Leaks:
        """Stop sampling, give stragglers ``grace`` seconds, kill and report what is left."""
        self._stop.set()
        self._thread.join()
        for pid in tagged(self.tag):
            self._note(pid)
        leaks = Leaks()
        running = wait_gone(list(self.seen), grace)
        for pid in running:
            leaks.orphans.append(f"pid {pid}: {self.seen[pid]}")
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(running, 5.0)
        for pid in running:  # ours to reap if we started it; counted once, as an orphan
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        deadline = time.monotonic() + grace
        while True:
            zombies = [pid for pid in self.seen if _unreaped_zombie(pid)]
            zombies += [p for p in children(os.getpid()) if state_of(p) == "Z"]
            if not zombies or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        leaks.zombies = [f"pid {pid}: {self.seen.get(pid, '?')}" for pid in sorted(set(zombies))]
        return leaks


def _unreaped_zombie(pid: int) -> bool:
    fields = stat_fields(pid)
    if not fields or fields[0] != b"Z":
        return False
    parent = int(fields[1])
    return parent > 1 and not gone(parent)


def run_program(
    name: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Run ``faults_programs.<name>`` as a controller process; its last stdout line (JSON).

    The program's own stderr is passed through on failure, so a broken program explains
    itself in the test report.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "faults_programs", name, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=HERE,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"program {name} exited with {proc.returncode}\n--- stdout\n{proc.stdout}"
            f"\n--- stderr\n{proc.stderr}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    result["_stderr"] = proc.stderr
    return result


def start_program(
    name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``faults_programs.<name>`` without waiting (for tests that kill it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "faults_programs", name, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=HERE,
    )


def read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The next JSON line a started program prints (it announces its pids that way)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    stderr = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
    raise AssertionError(f"program printed no JSON line within {timeout} s\n{stderr}")
