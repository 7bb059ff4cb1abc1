"""``python -m bench.tracing`` in a small form, so the script cannot break unnoticed."""

from __future__ import annotations

import pytest

from bench import tracing


@pytest.mark.timeout(300)
def test_the_tracing_cost_script_measures_each_mode() -> None:
    modes = ["off", "timeline"]
    if tracing.importlib.util.find_spec("opentelemetry.sdk") is not None:
        modes.append("otel-sdk")
    best = tracing.measure(rounds=1, calls=20, modes=modes)
    assert list(best) == modes
    for result in best.values():
        assert result["rtt_us"] > 0 and result["pipelined"] > 0
    assert tracing.table(best).count("\n") == len(modes) + 1
