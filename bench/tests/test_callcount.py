"""``python -m bench.callcount`` in a small form, so the script cannot break unnoticed."""

from __future__ import annotations

import asyncio
import os

import pytest

from bench import callcount


@pytest.mark.timeout(300)
@pytest.mark.parametrize("what", ["calls", "bytecode"])
def test_the_call_count_script_counts_both_sides_of_each_row(
    what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTORMESH_REPLY_SPIN", "0")
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    results = asyncio.run(callcount.measure(calls=20, what=what))
    assert list(results) == list(callcount.ROWS)
    for row in results.values():
        assert row["controller"][0] > 0 and row["workers"][0] > 0
        # Each round trip runs the echo endpoint once per actor called.
        assert any(name.endswith(":ping") for name in row["top"]["workers"])
    # A call to 4 actors runs 4 endpoints: more work in the workers than a call to one.
    assert results["gather_4"]["workers"][0] > 2 * results["rtt_async"]["workers"][0]
    assert callcount.table(results, what).count("\n") == len(callcount.ROWS) + 1
