"""Selection, timeouts and the record of torch's RPC suites (see ``torch_suite_harness``).

The default run takes the fast subset ``FAST``; ``ACTORMESH_TORCH_SUITE=full`` runs the
whole selection. With ``ACTORMESH_TORCH_SUITE_RECORD=path`` each test's outcome is
written to that JSON file as it finishes (``report.py`` reads it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

FULL_ENV = "ACTORMESH_TORCH_SUITE"
RECORD_ENV = "ACTORMESH_TORCH_SUITE_RECORD"
HERE = Path(__file__).resolve().parent
# pytest's limit for one test: above torch's own (RANK_TIMEOUT_S), which collects the
# ranks' stacks first.
TEST_TIMEOUT_S = 150

# The fast subset of the default run: "Suite.test_name".
FAST: list[str] = []

_records: dict[str, dict[str, Any]] = {}


def test_id(item: pytest.Item) -> str:
    """``Suite.test_name`` of a collected test."""
    return f"{item.parent.name}.{item.name}" if item.parent is not None else item.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = os.environ.get(FULL_ENV) == "full"
    keep, drop = [], []
    for item in items:
        if HERE not in item.path.parents:
            keep.append(item)
            continue
        item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))
        if full or test_id(item) in FAST:
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_ERROR = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Timeout|Exit|Failure)\b")


def failure_line(text: str) -> str:
    """The error a failed test ended with, in one line: the first failed rank's, as
    torch's controller reports it, else the last line pytest reported."""
    lines = [
        line[1:].strip() if line.startswith("E ") else line.strip() for line in text.splitlines()
    ]
    for index, line in enumerate(lines):
        if " exited with error code " in line:
            block = []
            for later in lines[index + 1 :]:
                if later.startswith("To execute this test") or " exited with error code " in later:
                    break
                block.append(later)
            errors = [b for b in block if _ERROR.match(b)]
            if errors:
                return errors[-1][:300]
    found = [line for line in lines if line.startswith(("E ", "RuntimeError", "Failed"))]
    return (found[-1] if found else (lines[-1] if lines else "?"))[:300]


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    target = os.environ.get(RECORD_ENV)
    if not target or HERE not in Path(report.fspath).resolve().parents:
        return
    name = ".".join(report.nodeid.split("::")[1:])
    record = _records.setdefault(name, {"outcome": "passed", "duration": 0.0})
    record["duration"] += report.duration
    if report.skipped:
        record["outcome"] = "skipped"
        longrepr = report.longrepr
        record["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    elif report.failed:
        record["outcome"] = "failed"
        text = str(report.longrepr)
        record["error"] = failure_line(text)
        record["timeout"] = "Timeout" in text or "timed out after" in text
    Path(target).write_text(json.dumps(_records, indent=1, sort_keys=True))
