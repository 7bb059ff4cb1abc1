"""Session-wide test set-up: no worker process may outlive the test session.

Every process the tests start inherits ``ACTORMESH_TEST_SESSION``, set here at import to a
fresh UUID. When the session ends, any live process whose command line names the worker
bootstrap module and whose environment carries this session's UUID is a leak: it is
killed and the run fails, whatever the tests themselves reported. Matching on the UUID
means runs side by side (two checkouts, xdist workers) never blame each other's workers.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SESSION_ENV = "ACTORMESH_TEST_SESSION"
SESSION_ID = uuid.uuid4().hex
# Set at import, before any test runs, so every process started from here inherits it.
os.environ[SESSION_ENV] = SESSION_ID
# Job event logs of the tests' controllers go to a folder of this session (removed at its
# end), not to the user's state directory; a test that reads them sets its own.
_STATE_DIR = tempfile.mkdtemp(prefix="am-test-state-")
os.environ.setdefault("ACTORMESH_STATE_DIR", _STATE_DIR)

# Words in a command line that mark an actormesh worker process: a worker, a worker
# loop (a job's host, actormesh's or Monarch's) and a loop's agent session.
WORKER_MARKERS = (
    "actormesh._bootstrap",
    "run_worker_loop_forever",
    "actormesh._hosts._worker_loop",
)

# Workers of a mesh stopped by the last test may still be on their way out; this is how
# long they get before they count as leaked.
EXIT_GRACE_S = 5.0

_PROC = Path("/proc")
_leak_report: list[str] = []


def actormesh_files() -> set[str]:
    """What actormesh could have left in the temporary directory (socket directories)."""
    return {str(p) for p in Path(tempfile.gettempdir()).glob("actormesh-*")}


# Taken at import, before any test runs: whatever appears after is this session's.
_FILES_BEFORE = actormesh_files()


@dataclass(frozen=True)
class WorkerProcess:
    """A live process that belongs to this test session."""

    pid: int
    cmdline: str


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process exited meanwhile, or is not ours to read
        return b""


def find_session_workers(session_id: str = SESSION_ID) -> list[WorkerProcess]:
    """Lists live worker processes whose environment names ``session_id``.

    Zombies are not listed: their command line and environment read as empty.
    """
    wanted = f"{SESSION_ENV}={session_id}".encode()
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        argv = _read(entry / "cmdline").split(b"\0")
        cmdline = " ".join(a.decode(errors="replace") for a in argv if a)
        if not any(marker in cmdline for marker in WORKER_MARKERS):
            continue
        if wanted in _read(entry / "environ").split(b"\0"):
            found.append(WorkerProcess(int(entry.name), cmdline))
    return found


def _wait_for_exit(pids: list[int], timeout: float) -> None:
    """Blocks until every process in ``pids`` has exited or ``timeout`` passed.

    Waits on pidfds, which turn readable when their process exits, so there is no
    polling loop; the processes need not be children of this one.
    """
    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue  # already gone
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        pending = set(fds)
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for fd, _ in poller.poll(left * 1000):
                pending.discard(fd)
                poller.unregister(fd)
    finally:
        for fd in fds:
            os.close(fd)


def reap_leaked_workers(grace: float = EXIT_GRACE_S) -> list[WorkerProcess]:
    """Kills this session's workers still alive after ``grace`` seconds; returns them."""
    workers = find_session_workers()
    if not workers:
        return []
    _wait_for_exit([w.pid for w in workers], grace)
    leaked = find_session_workers()
    for worker in leaked:
        with contextlib.suppress(ProcessLookupError):  # it exited during the grace period
            os.kill(worker.pid, signal.SIGKILL)
    _wait_for_exit([w.pid for w in leaked], grace)
    return leaked


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_STATE_DIR, ignore_errors=True)
    leaked = reap_leaked_workers()
    left = sorted(actormesh_files() - _FILES_BEFORE)
    if not leaked and not left:
        return
    _leak_report.extend(f"pid {w.pid}: {w.cmdline}" for w in leaked)
    _leak_report.extend(f"file left on disk: {path}" for path in left)
    # pytest returns session.exitstatus, so this turns a green run red.
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _leak_report:
        return
    terminalreporter.section("LEAKED PROCESSES OR FILES", sep="!", red=True, bold=True)
    terminalreporter.line(
        f"{len(_leak_report)} actormesh worker process(es) or file(s) made by this test "
        f"session were still there after it ended (processes killed now); some test or "
        f"fixture does not stop what it spawned:",
        red=True,
    )
    for line in _leak_report:
        terminalreporter.line(f"  {line}", red=True)


@pytest.fixture(autouse=True, scope="module")
def _keep_breakpoint_setting() -> Iterator[None]:
    """``ray.init`` points ``PYTHONBREAKPOINT`` of this process at Ray's debugger, and does
    not undo it: put it back after each module, so later tests' processes do not inherit
    it (an actormesh worker honours ``PYTHONBREAKPOINT`` when it is set)."""
    before = os.environ.get("PYTHONBREAKPOINT")
    yield
    if before is None:
        os.environ.pop("PYTHONBREAKPOINT", None)
    else:
        os.environ["PYTHONBREAKPOINT"] = before


@pytest.fixture
def failures() -> Iterator[list[Any]]:
    """Collects the failures that reach the controller (``actormesh.Failure``) instead of
    printing them; the default hook is back afterwards. (The multi-host tests have their
    own, which record more.)"""
    import actormesh

    seen: list[Any] = []
    actormesh.set_failure_hook(seen.append)
    try:
        yield seen
    finally:
        actormesh.set_failure_hook(None)


@pytest.fixture
def folded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rank of every value the caller's ``reduce`` folds from now on, in order
    (``headers.PARTIAL``: a host agent's, or a subtree's, partial result)."""
    from actormesh._api import _requests

    seen: list[int] = []
    original = _requests._Reduce._value

    def recording(self: Any, rank: int, value: Any) -> None:
        seen.append(rank)
        original(self, rank, value)

    monkeypatch.setattr(_requests._Reduce, "_value", recording)
    return seen
