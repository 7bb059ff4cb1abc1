"""The fault suite's fixtures: every test is watched for leaks and reports its figures.

Each test runs with its own ``ACTORMESH_FAULT_TAG`` (see ``faults_support``); when it ends,
any process it started that still runs (an orphan), any zombie nobody reaped, any new open
descriptor and any new shared-memory segment (a memory file this process holds by a
descriptor or a mapping, see ``faults_support.shm_segments``) fails it. Tests add their
own figures (death-detection times, lost or duplicated calls) through the ``figures``
fixture.

With ``ACTORMESH_FAULT_REPORT=<file>`` set, the session writes every test's outcome, leaks
and figures there as JSON; ``python -m tests.faults.report`` runs the suite that way and
prints the table.

The actor classes live in ``faults_actors.py``; workers import them by name, so this
directory goes on ``PYTHONPATH`` here, before any worker starts.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from faults_support import TAG, ProcessWatch, open_fds, shm_segments, socket_files

from actormesh._hosts import Runtime
from actormesh._observe import observer

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)

# Seconds a test's processes get to finish exiting after it ends before they count as
# orphans (the tests themselves check the tighter bounds they promise).
_EXIT_GRACE_S = 10.0

_RESULTS: dict[str, dict[str, Any]] = {}


class Figures:
    """Numbers a test reports for the suite's table."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def add(self, name: str, value: float) -> None:
        """Record one observation of ``name`` (a time in seconds, a count)."""
        self.values.setdefault(name, []).append(float(value))


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    """Where a test records its figures (kept with its outcome for the report)."""
    found = Figures()
    _RESULTS.setdefault(request.node.nodeid, {})["figures"] = found.values
    return found


@pytest.fixture(autouse=True)
def leak_check(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test when it leaves processes, zombies, descriptors, segments or files."""
    # The controller runtime's own descriptors are not the test's, nor its job socket
    # (where `actormesh top` finds it), which the first spawn of the session opens.
    observer(Runtime.get())
    tag = uuid.uuid4().hex
    previous = os.environ.get(TAG)
    os.environ[TAG] = tag
    fds_before = open_fds()
    shm_before = shm_segments()
    files_before = socket_files()
    watch = ProcessWatch(tag)
    watch.start()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TAG, None)
        else:
            os.environ[TAG] = previous
        leaks = watch.finish(_EXIT_GRACE_S)
        leaks.fds = _new_fds(fds_before, Runtime.get().owned_descriptors)
        leaks.shm = _new_segments(shm_before)
        leaks.files = sorted(socket_files() - files_before)
        record = _RESULTS.setdefault(request.node.nodeid, {})
        record["processes"] = len(watch.seen)
        record["leaks"] = leaks.__dict__
        if leaks.total():
            pytest.fail(f"the test leaked: {json.dumps(leaks.__dict__, indent=2)}")


def _new_fds(before: dict[int, str], runtime_owned: Callable[[], set[int]]) -> list[str]:
    # Descriptors close on the loop thread a moment after the processes are gone. The
    # sockets of sync threads' reply routes to processes that outlive the test (a module's
    # mesh) and the fork server's are the runtime's, as its own connections are: they
    # close when those processes go away, the thread ends or the runtime stops.
    deadline = time.monotonic() + 5.0
    while True:
        now = open_fds()
        owned = runtime_owned()
        new = [
            f"{fd} -> {target}"
            for fd, target in now.items()
            if before.get(fd) != target and fd not in owned
        ]
        new = [entry for entry in new if not _transient(entry)]
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.02)


def _new_segments(before: dict[int, str]) -> list[str]:
    # As descriptors, segments lent to a process that died are dropped on the loop thread
    # a moment after it is gone.
    deadline = time.monotonic() + 5.0
    while True:
        new = [held for inode, held in shm_segments().items() if inode not in before]
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.02)


def _transient(entry: str) -> bool:
    # The directory listing itself, and pytest's capture files, come and go.
    return "/proc/" in entry or "pytest-of" in entry or "/tmp/pytest" in entry


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    record = _RESULTS.setdefault(item.nodeid, {})
    if report.when == "call" or report.failed or report.skipped:
        phase = record.setdefault("phases", {})
        phase[report.when] = report.outcome
        text = str(report.longrepr or "")
        if ("Timeout" in text and "pytest-timeout" in text) or "Timeout >" in text:
            record["hang"] = True
        record["duration"] = record.get("duration", 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("ACTORMESH_FAULT_REPORT")
    if target:
        Path(target).write_text(json.dumps(_RESULTS, indent=1, default=str))
