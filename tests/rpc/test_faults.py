"""Workers killed in the middle of an RPC, a ``to_here`` and a distributed backward pass:
each wait ends at once with ``WorkerDiedError`` (a ``RuntimeError``), never a hang, and
so does the graceful shutdown that follows (torch's would wait forever)."""

from __future__ import annotations

from typing import Any

import pytest
import rpc_programs
from rpc_support import run_group

# Groups of processes start slowly on a loaded machine (each imports torch).
pytestmark = pytest.mark.timeout(200)


@pytest.fixture(scope="module")
def deaths() -> dict[str, Any]:
    result: dict[str, Any] = run_group(
        rpc_programs.death, 4, timeout=100, may_die=frozenset({1, 2, 3})
    )[0]
    return result


def _died(outcome: list[Any], worker: str) -> None:
    name, is_runtime_error, message, seconds = outcome
    assert name == "WorkerDiedError", message
    assert is_runtime_error
    assert worker in message
    assert seconds < 10  # at once in practice; generous for a loaded machine


def test_rpc_sync_to_a_worker_killed_while_running_it_fails_at_once(
    deaths: dict[str, Any],
) -> None:
    _died(deaths["rpc_sync"], "name=w1")
    assert "rpc_sync(die_now)" in deaths["rpc_sync"][2]


def test_calls_to_a_dead_worker_fail_without_waiting(deaths: dict[str, Any]) -> None:
    _died(deaths["after_death"], "name=w1")
    assert deaths["after_death"][3] < 1


def test_to_here_fails_when_the_owner_dies_before_the_value_exists(
    deaths: dict[str, Any],
) -> None:
    _died(deaths["to_here"], "name=w2")


def test_distributed_backward_fails_when_a_worker_dies_during_it(deaths: dict[str, Any]) -> None:
    _died(deaths["backward"], "name=w3")
    assert "distributed backward" in deaths["backward"][2]


def test_contexts_of_a_dead_worker_and_finished_ones_are_released(
    deaths: dict[str, Any],
) -> None:
    assert deaths["foreign_context"] == 3  # the context id names its creator, w3
    assert deaths["contexts_before"] == 1
    assert deaths["contexts_after"] == 0


def test_graceful_shutdown_with_dead_peers_fails_clearly_instead_of_hanging(
    deaths: dict[str, Any],
) -> None:
    name, is_runtime_error, message, seconds = deaths["shutdown"]
    assert name == "WorkerDiedError", message
    assert is_runtime_error
    assert "shutdown" in message and "gone" in message
    assert seconds < 10  # at once in practice; generous for a loaded machine


def test_graceful_shutdown_fails_clearly_when_rank_zero_left_without_waiting() -> None:
    results = run_group(rpc_programs.leader_leaves_early, 3, timeout=100, may_die=frozenset({0}))
    for rank in (1, 2):
        name, message, seconds = results[rank]
        assert name == "WorkerDiedError", message
        assert "shutdown" in message and "name=w0" in message
        assert seconds < 10


def test_graceful_shutdown_after_a_death_names_the_dead_worker_everywhere() -> None:
    # Rank 0 keeps the barrier: its own verdict and what it tells a rank that arrives
    # after it left both name w1, the worker that died, never rank 0 itself.
    results = run_group(
        rpc_programs.one_dies_before_shutdown, 3, timeout=100, may_die=frozenset({1})
    )
    for rank in (0, 2):
        name, message, seconds = results[rank]
        assert name == "WorkerDiedError", message
        assert "name=w1) is gone before reaching shutdown" in message, message
        assert seconds < 10
