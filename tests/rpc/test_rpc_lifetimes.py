"""RRef reference counting across three workers: values live exactly as long as some
worker holds a reference (actormesh.rpc; torch offers no way to observe this in order)."""

from __future__ import annotations

from typing import Any

import pytest
import rpc_programs
from rpc_support import run_group

# Groups of processes start slowly on a loaded machine (each imports torch).
pytestmark = pytest.mark.timeout(200)


@pytest.fixture(scope="module")
def lifetime() -> dict[str, Any]:
    result: dict[str, Any] = run_group(rpc_programs.lifetime, 3, timeout=100)[0]
    return result


def test_owner_keeps_a_value_while_a_third_worker_holds_a_fork(
    lifetime: dict[str, Any],
) -> None:
    assert lifetime["created"] == ["a"]
    # The creator dropped its reference after handing it to w2: the owner still has it.
    assert lifetime["creator_dropped"] == ["a"]
    assert lifetime["third_worker_reads"] == ["a"]


def test_owner_releases_a_value_once_every_fork_is_gone(lifetime: dict[str, Any]) -> None:
    assert lifetime["all_dropped"] == []
    assert lifetime["returned_dropped"] == []
    assert lifetime["owner_entries"] == 0


def test_forks_dropped_while_in_flight_are_never_released_early(
    lifetime: dict[str, Any],
) -> None:
    assert sorted(lifetime["handed_on_reads"]) == [f"m{i:02}" for i in range(20)]


def test_rrefs_returned_by_or_sent_back_to_their_owner_resolve_to_the_value(
    lifetime: dict[str, Any],
) -> None:
    assert lifetime["returned_alive"] == ["b"]
    assert lifetime["back_at_owner"] is True


def test_graceful_shutdown_waits_for_outstanding_calls(lifetime: dict[str, Any]) -> None:
    assert lifetime["outstanding_done"] == [True, 0.5]
