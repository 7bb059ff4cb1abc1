"""A pytest plugin that records each test's outcome as it goes (both sides load it).

Loaded with ``-p monarch_suite_recorder`` from the run's folder, under Monarch's Python
and under actormesh's; it needs only pytest. It appends one JSON line per event to the
file ``$MONARCH_SUITE_RECORD`` and flushes it, so a run that dies or is killed mid-test
still tells what finished and which test was running:

- ``{"event": "start", "nodeid": ...}`` when a test begins;
- ``{"event": "result", "nodeid", "outcome", "error", "detail", "seconds", "timeout"}``
  when its teardown ends (outcome: passed, failed, error, skipped, xfailed, xpassed);
- ``{"event": "collect_error", "nodeid", "error", "detail"}`` for a file that fails to
  import;
- ``{"event": "collected", "nodeids": [...]}`` once selection is done.

``$MONARCH_SUITE_DESELECT`` names a JSON list of test keys not to run: a key is a node id
without its parameters (``tests/test_x.py::Class::test_y``), or a full node id.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pytest

_RECORD = os.environ.get("MONARCH_SUITE_RECORD", "")
_DESELECT = os.environ.get("MONARCH_SUITE_DESELECT", "")
_TIMEOUT = re.compile(r"Timeout \(?>\s*[\d.]+s\)?")
_phases: dict[str, dict[str, Any]] = {}


def _write(entry: dict[str, Any]) -> None:
    if not _RECORD:
        return
    with open(_RECORD, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _error_of(report: Any) -> tuple[str, str]:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = str(getattr(report, "longreprtext", "") or longrepr or "")
    if crash is not None and getattr(crash, "message", None):
        line = crash.message
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:
        line = str(longrepr[2])
    else:
        lines = [x for x in text.strip().splitlines() if x.strip()]
        line = lines[-1] if lines else ""
    return line.strip()[:2000], text[-6000:]


@pytest.hookimpl(trylast=True)  # after -m "not oss_skip" has deselected its tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    drop: set[str] = set()
    if _DESELECT:
        with open(_DESELECT) as f:
            drop = set(json.load(f))
    keep, dropped = [], []
    for item in items:
        key = item.nodeid.split("[", 1)[0]
        (dropped if key in drop or item.nodeid in drop else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    _write({"event": "collected", "nodeids": [i.nodeid for i in items]})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        line, detail = _error_of(report)
        _write({"event": "collect_error", "nodeid": report.nodeid, "error": line, "detail": detail})


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _phases[nodeid] = {"started": time.monotonic()}
    _write({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    state = _phases.setdefault(report.nodeid, {"started": time.monotonic()})
    if "outcome" not in state:
        if hasattr(report, "wasxfail"):
            state["outcome"] = "xpassed" if report.passed else "xfailed"
        elif report.failed:
            state["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped:
            state["outcome"] = "skipped"
        if report.failed or report.skipped:
            state["error"], state["detail"] = _error_of(report)
            if report.failed and report.when != "call":
                state["error"] = f"in {report.when}: {state['error']}"
    if report.when == "teardown":
        outcome = state.get("outcome", "passed")
        error = state.get("error", "")
        _write(
            {
                "event": "result",
                "nodeid": report.nodeid,
                "outcome": outcome,
                "error": error,
                "detail": state.get("detail", ""),
                "seconds": round(time.monotonic() - state["started"], 2),
                "timeout": bool(outcome in ("failed", "error") and _TIMEOUT.search(error)),
            }
        )
        _phases.pop(report.nodeid, None)
