"""examples/rl_service.py runs to completion as a user runs it (the run with a replica
killed is in tests/faults/test_fault_services.py, under the fault suite's leak checks)."""

from __future__ import annotations

from service_support import run_rl_service


def test_rl_service_refits_every_step_and_learns() -> None:
    out, summary, err = run_rl_service("--steps", "4", "--rollouts", "12")
    assert err == ""
    assert summary["steps"] == 4 and summary["rollouts"] == 48 and summary["retried"] == 0
    assert summary["versions"] == [4, 4, 4] and summary["restarts"] == [0, 0, 0]
    assert summary["final_versions"] == [[4, 4]]
    for step in range(4):
        assert f"step {step}: " in out and f"version {step};" in out
