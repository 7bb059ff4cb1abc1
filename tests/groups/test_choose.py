"""Issue 6, point 2: load-aware ``choose``, its policies' promises, backpressure, liveness."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from groups_actors import Worker

import actormesh
from actormesh import (
    Affinity,
    CallTimeoutError,
    MeshBusyError,
    actor_mesh,
)
from actormesh.testing import wait_until

FAST = 0.01  # seconds of work per call on a fast rank; the slow one takes 10 times longer


@pytest.fixture(scope="module")
def workers() -> Iterator[Any]:
    """Four actors, rank 0 ten times slower than the others."""
    mesh = actor_mesh(Worker, ((0,), 10.0), shape=4, name="workers").get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


async def closed_loop(mesh: Any, clients: int, calls: int, seconds: float) -> Counter[int]:
    """``clients`` callers each waiting for its answer before the next call; who served."""
    served: Counter[int] = Counter()
    left = calls

    async def client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            served[await mesh.work.choose(seconds)] += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return served


def test_power_of_two_sends_a_slow_rank_clearly_fewer_calls(workers: Any) -> None:
    served = asyncio.run(closed_loop(workers, clients=8, calls=160, seconds=FAST))
    assert sum(served.values()) == 160
    fast = [served[rank] for rank in (1, 2, 3)]
    # Even shares would be 40 each; the slow rank keeps calls in flight longer, so two
    # probes rarely prefer it (about a sixth of a fast rank's share on a quiet machine).
    assert served[0] * 2 < sum(fast) / 3, served


def test_least_loaded_also_avoids_the_slow_rank_while_round_robin_does_not(
    workers: Any,
) -> None:
    least = asyncio.run(closed_loop(workers.with_policy("least_loaded"), 8, 120, FAST))
    rotating = asyncio.run(closed_loop(workers.with_policy("round_robin"), 8, 120, FAST))
    assert least[0] * 2 < sum(least[r] for r in (1, 2, 3)) / 3, least
    assert sorted(rotating.values()) == [30, 30, 30, 30]


def test_random_policy_reaches_every_rank(workers: Any) -> None:
    mesh = workers.with_policy(actormesh.Random(seed=3))
    served = Counter(mesh.work.choose(0).get(timeout=30) for _ in range(60))
    assert set(served) == {0, 1, 2, 3}


def test_pull_queue_keeps_every_rank_busy_with_uneven_work() -> None:
    # Uneven "rollouts": a few long ones among many short ones, all submitted at once.
    durations = [0.25, 0.03, 0.03, 0.18, 0.03, 0.03, 0.1, 0.03] * 3
    with actor_mesh(Worker, shape=3, choose="work_queue").get(timeout=60) as mesh:
        futures = [mesh.work.choose(d) for d in durations]
        # Pull-based: a rank holds at most one call; the rest wait here, not in mailboxes.
        assert all(s["in_flight"] <= 1 for s in mesh.stats().values())
        for future in futures:
            future.get(timeout=30)
        spans = list(mesh.timeline.call().get(timeout=30).values())
    total = sum(durations)
    longest = max(durations)
    ends = [s[-1][1] for s in spans]
    start = min(s[0][0] for s in spans)
    # A rank goes idle only when nothing is left to pull: all finish within one task.
    assert max(ends) - min(ends) <= longest + 0.05, ends
    # Between two of its calls a rank waits about one round trip, not for others' work.
    gaps = sorted(b[0] - a[1] for s in spans for a, b in itertools.pairwise(s))
    assert gaps[len(gaps) // 2] < min(durations), gaps
    assert max(ends) - start <= total / 3 + longest + 0.1


def test_affinity_keeps_each_key_on_one_rank_and_spreads_keys(workers: Any) -> None:
    mesh = workers.with_policy("affinity")
    homes: dict[str, set[int]] = {}
    for _ in range(5):
        for key in ("lora-a", "lora-b", "lora-c", "lora-d", "lora-e", "lora-f"):
            rank = mesh.work.choose_with(key=key)(0).get(timeout=30)
            homes.setdefault(key, set()).add(rank)
    assert all(len(ranks) == 1 for ranks in homes.values()), homes
    assert len({next(iter(r)) for r in homes.values()}) > 1
    # The key's home is the one the policy computes, the same in every process.
    live = [0, 1, 2, 3]
    for key, ranks in homes.items():
        assert Affinity().preference(key, live)[0] in ranks


def test_a_key_on_a_keyless_policy_routes_by_affinity(workers: Any) -> None:
    ranks = {workers.work.choose_with(key=("prefix", 7))(0).get(timeout=30) for _ in range(10)}
    assert len(ranks) == 1


def test_affinity_spills_a_hot_key_within_the_imbalance_bound(workers: Any) -> None:
    mesh = workers.with_policy(Affinity(max_imbalance=2))
    futures = [mesh.work.choose_with(key="hot")(0.2) for _ in range(12)]
    in_flight = [s["in_flight"] for s in mesh.stats().values()]
    for future in futures:
        future.get(timeout=30)
    assert sum(in_flight) == 12
    assert max(in_flight) - min(in_flight) <= 3, in_flight


def test_max_in_flight_makes_callers_wait_for_capacity(workers: Any) -> None:
    mesh = workers.slice(dim0=slice(1, 3)).with_policy(max_in_flight=1)
    futures = [mesh.work.choose(0.05) for _ in range(6)]
    in_flight = [workers.stats()[rank]["in_flight"] for rank in (1, 2)]
    results = [f.get(timeout=30) for f in futures]
    assert max(in_flight) == 1, in_flight
    assert len(results) == 6 and set(results) == {1, 2}


def test_max_in_flight_with_when_full_error_raises_mesh_busy(workers: Any) -> None:
    mesh = workers.slice(dim0=slice(1, 3))
    first = [mesh.work.choose_with(max_in_flight=1, when_full="error")(0.1) for _ in range(2)]
    with pytest.raises(MeshBusyError, match="has 1 call"):
        mesh.work.choose_with(max_in_flight=1, when_full="error")(0.1)
    for future in first:
        future.get(timeout=30)
    assert mesh.work.choose_with(max_in_flight=1, when_full="error")(0).get(timeout=30) in (1, 2)


def test_a_call_that_would_rather_fail_does_not_queue_behind_waiting_ones(workers: Any) -> None:
    one = workers.slice(dim0=1).with_policy(max_in_flight=1)
    busy = one.work.choose(0.1)
    waiting = one.work.choose(0)
    with pytest.raises(MeshBusyError):
        one.work.choose_with(when_full="error")(0)
    assert (busy.get(timeout=30), waiting.get(timeout=30)) == (1, 1)


def test_a_waiting_call_can_be_cancelled_or_time_out_without_running(workers: Any) -> None:
    one = workers.slice(dim0=2).with_policy(max_in_flight=1)
    before = one.count.call_one().get(timeout=30)
    busy = one.work.choose(0.2)
    waiting = one.work.choose(0)
    timing_out = one.work.choose(0)
    assert waiting.cancel()
    with pytest.raises(CallTimeoutError, match=r"with capacity .*cancel\(\) drops it"):
        timing_out.get(timeout=0.05)  # the wait runs out; the call still waits its turn...
    assert timing_out.cancel()  # ...until the caller gives it up
    assert busy.get(timeout=30) == 2
    assert one.count.call_one().get(timeout=30) == before + 1  # the others never ran


def test_an_endpoint_can_declare_its_policy(workers: Any) -> None:
    assert [workers.rotate.choose().get(timeout=30) for _ in range(8)] == [0, 1, 2, 3] * 2


def test_stats_report_load_and_latency_per_rank(workers: Any) -> None:
    mesh = workers.slice(dim0=3)
    before = workers.stats()[3]["completed"]
    for _ in range(5):
        mesh.work.choose(0.01).get(timeout=30)
    stats = workers.stats()[3]
    assert stats["completed"] == before + 5
    assert stats["in_flight"] == 0
    assert stats["alive"] is True
    assert stats["p50"] <= stats["p90"] <= stats["p99"]
    assert stats["p99"] >= 0.01  # the window holds the calls just made


def test_dead_ranks_are_never_chosen(failures: list[actormesh.Failure]) -> None:
    with actor_mesh(Worker, shape=3).get(timeout=60) as mesh:
        os.kill(mesh.slice(dim0=1).pid.call_one().get(timeout=30), signal.SIGKILL)
        wait_until(lambda: bool(failures), 10, "the death to be reported")
        assert failures[0].ranks == (1,)
        assert mesh.stats()[1]["alive"] is False
        for policy in ("power_of_two", "round_robin", "least_loaded", "random", "work_queue"):
            chosen = [mesh.with_policy(policy).work.choose(0) for _ in range(12)]
            assert {f.get(timeout=30) for f in chosen} == {0, 2}, policy
        assert mesh.work.choose_with(key="k")(0).get(timeout=30) in (0, 2)


def test_every_rank_dead_fails_choose_at_once(failures: list[actormesh.Failure]) -> None:
    with actor_mesh(Worker, shape=1).get(timeout=60) as mesh:
        os.kill(mesh.pid.call_one().get(timeout=30), signal.SIGKILL)
        wait_until(lambda: bool(failures), 10, "the death to be reported")
        with pytest.raises(actormesh.ActorDiedError, match="is dead"):
            mesh.work.choose(0)
