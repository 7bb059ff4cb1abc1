"""Issue 6, point 2: load-aware ``choose``, its policies' promises, backpressure, liveness."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
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

FAST = 0.01  # seconds of work per call on a fast rank
SLOWDOWN = 50.0  # how much longer the slow rank takes: far beyond a loaded machine's noise


@pytest.fixture(scope="module")
def workers() -> Iterator[Any]:
    """Four actors, rank 0 ten times slower than the others."""
    mesh = actor_mesh(Worker, ((0,), 10.0), shape=4, name="workers").get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture(scope="module")
def lopsided() -> Iterator[Any]:
    """Four actors, rank 0 ``SLOWDOWN`` times slower than the others (0.5 s a call)."""
    mesh = actor_mesh(Worker, ((0,), SLOWDOWN), shape=4, name="lopsided").get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Path]:
    """A file whose creation ends every ``hold(gate)`` call (created at the end anyway)."""
    path = tmp_path / "gate"
    try:
        yield path
    finally:
        path.touch()


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


def test_power_of_two_sends_a_slow_rank_clearly_fewer_calls(lopsided: Any) -> None:
    served = asyncio.run(closed_loop(lopsided, clients=8, calls=160, seconds=FAST))
    assert sum(served.values()) == 160
    fast = [served[rank] for rank in (1, 2, 3)]
    # Even shares would be 40 each; the slow rank keeps calls in flight far longer (a
    # loaded machine adds the same delays to every call, small beside its 0.5 s), so two
    # probes rarely prefer it.
    assert served[0] * 2 < sum(fast) / 3, served


def test_least_loaded_also_avoids_the_slow_rank_while_round_robin_does_not(
    lopsided: Any, workers: Any
) -> None:
    least = asyncio.run(closed_loop(lopsided.with_policy("least_loaded"), 8, 120, FAST))
    # Round robin ignores load: every rank gets its turn, the slow one too (a mesh whose
    # slow rank is 10 times slower: the 30 calls it gets take 3 s, not 15).
    rotating = asyncio.run(closed_loop(workers.with_policy("round_robin"), 8, 120, FAST))
    assert least[0] * 2 < sum(least[r] for r in (1, 2, 3)) / 3, least
    assert sorted(rotating.values()) == [30, 30, 30, 30]


def test_random_policy_reaches_every_rank(workers: Any) -> None:
    mesh = workers.with_policy(actormesh.Random(seed=3))
    served = Counter(mesh.work.choose(0).get(timeout=30) for _ in range(60))
    assert set(served) == {0, 1, 2, 3}


def test_pull_queue_keeps_every_rank_busy_with_uneven_work() -> None:
    # Uneven "rollouts", all submitted at once: a long one every third call. Pushed round
    # robin would give all eight long ones to rank 0.
    long, short = 0.3, 0.02
    durations = [long, short, short] * 8
    with actor_mesh(Worker, shape=3, choose="work_queue").get(timeout=60) as mesh:
        futures = [mesh.work.choose(d) for d in durations]
        ranks = []
        for future in futures:
            # Pull-based: a rank holds at most one call; the rest wait here, not in
            # mailboxes (checked all along).
            assert all(s["in_flight"] <= 1 for s in mesh.stats().values()), mesh.stats()
            ranks.append(future.get(timeout=30))
    # A rank pulls its next call when it is free: while one runs a long call, the others
    # take the calls behind it (the short ones, and the next long one).
    longs = Counter(rank for rank, d in zip(ranks, durations, strict=True) if d == long)
    assert max(longs.values()) <= 4, longs
    assert set(ranks) == {0, 1, 2}


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


def test_affinity_spills_a_hot_key_within_the_imbalance_bound(workers: Any, gate: Path) -> None:
    mesh = workers.with_policy(Affinity(max_imbalance=2))
    # Calls that end only when the gate opens: all 12 are in flight when looked at.
    futures = [mesh.hold.choose_with(key="hot")(str(gate)) for _ in range(12)]
    in_flight = [s["in_flight"] for s in mesh.stats().values()]
    gate.touch()
    for future in futures:
        future.get(timeout=30)
    assert sum(in_flight) == 12
    assert max(in_flight) - min(in_flight) <= 3, in_flight


def test_max_in_flight_makes_callers_wait_for_capacity(workers: Any, gate: Path) -> None:
    mesh = workers.slice(dim0=slice(1, 3)).with_policy(max_in_flight=1)
    futures = [mesh.hold.choose(str(gate)) for _ in range(6)]
    # Both ranks hold one call until the gate opens; the four others wait here.
    in_flight = [workers.stats()[rank]["in_flight"] for rank in (1, 2)]
    assert in_flight == [1, 1], in_flight
    assert not any(f.done() for f in futures)
    gate.touch()
    results = [f.get(timeout=30) for f in futures]
    assert len(results) == 6 and set(results) == {1, 2}


def test_max_in_flight_with_when_full_error_raises_mesh_busy(workers: Any, gate: Path) -> None:
    mesh = workers.slice(dim0=slice(1, 3))
    hold = mesh.hold.choose_with(max_in_flight=1, when_full="error")
    first = [hold(str(gate)) for _ in range(2)]  # one on each rank, until the gate opens
    with pytest.raises(MeshBusyError, match="has 1 call"):
        hold(str(gate))
    gate.touch()
    for future in first:
        future.get(timeout=30)
    assert mesh.work.choose_with(max_in_flight=1, when_full="error")(0).get(timeout=30) in (1, 2)


def test_a_call_that_would_rather_fail_does_not_queue_behind_waiting_ones(
    workers: Any, gate: Path
) -> None:
    one = workers.slice(dim0=1).with_policy(max_in_flight=1)
    busy = one.hold.choose(str(gate))
    waiting = one.work.choose(0)
    with pytest.raises(MeshBusyError):
        one.work.choose_with(when_full="error")(0)
    gate.touch()
    assert (busy.get(timeout=30), waiting.get(timeout=30)) == (1, 1)


def test_a_waiting_call_can_be_cancelled_or_time_out_without_running(
    workers: Any, gate: Path
) -> None:
    one = workers.slice(dim0=2).with_policy(max_in_flight=1)
    before = one.count.call_one().get(timeout=30)
    busy = one.hold.choose(str(gate))  # holds the rank's one place until the gate opens
    waiting = one.work.choose(0)
    timing_out = one.work.choose(0)
    assert waiting.cancel()
    with pytest.raises(CallTimeoutError, match=r"with capacity .*cancel\(\) drops it"):
        timing_out.get(timeout=0.05)  # the wait runs out; the call still waits its turn...
    assert timing_out.cancel()  # ...until the caller gives it up
    gate.touch()
    assert busy.get(timeout=30) == 2
    assert one.count.call_one().get(timeout=30) == before  # the work calls never ran


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
