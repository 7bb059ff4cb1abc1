"""Choose policies: load awareness, fairness, stickiness and the pull-queue contract."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actormesh._pure._routing import (
    Affinity,
    ChoosePolicy,
    LeastLoaded,
    NoCapacity,
    PowerOfTwo,
    Random,
    RoundRobin,
    WorkQueue,
    policy_from,
    takes_key,
)

POLICY_NAMES = ["affinity", "least_loaded", "power_of_two", "random", "round_robin", "work_queue"]


def pick_counts(
    policy: ChoosePolicy,
    candidates: Sequence[int],
    in_flight: Sequence[int],
    times: int,
    key: Hashable | None = None,
) -> Counter[int]:
    return Counter(policy.choose(candidates, in_flight, key) for _ in range(times))


@st.composite
def candidates_and_loads(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    candidates = draw(st.lists(st.integers(0, 64), min_size=1, max_size=12, unique=True))
    loads = draw(st.lists(st.integers(0, 6), min_size=len(candidates), max_size=len(candidates)))
    return candidates, loads


# --- shared contract -------------------------------------------------------------------------


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_rejects_an_empty_candidate_list(name: str) -> None:
    with pytest.raises(ValueError, match="no live ranks to choose from"):
        policy_from(name).choose([], [])


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_rejects_mismatched_in_flight_counts(name: str) -> None:
    with pytest.raises(ValueError, match="2 candidates but 1 in-flight"):
        policy_from(name).choose([0, 1], [0])


@pytest.mark.parametrize("name", POLICY_NAMES)
@given(case=candidates_and_loads(), key=st.none() | st.text(max_size=5) | st.integers())
def test_every_policy_returns_one_of_the_candidates(
    name: str, case: tuple[list[int], list[int]], key: Hashable | None
) -> None:
    candidates, loads = case
    policy = policy_from(name)
    try:
        chosen = policy.choose(candidates, loads, key)
    except NoCapacity:
        assert name == "work_queue"
        assert min(loads) >= 1
        return
    assert chosen in candidates


# --- PowerOfTwo ------------------------------------------------------------------------------


def test_power_of_two_never_picks_a_rank_busier_than_all_others() -> None:
    counts = pick_counts(PowerOfTwo(seed=1), [0, 1, 2, 3], [50, 0, 0, 0], 3000)
    assert counts[0] == 0
    # The other three share the calls about evenly (expected 1000 each).
    assert all(800 < counts[r] < 1200 for r in (1, 2, 3)), counts


def test_power_of_two_rarely_picks_busy_ranks() -> None:
    # Busy ranks win only when both probes land on busy ranks: 2 of 28 pairs of 8 ranks.
    counts = pick_counts(PowerOfTwo(seed=2), range(8), [9, 9, 0, 0, 0, 0, 0, 0], 8000)
    busy, idle = counts[0] + counts[1], sum(counts[r] for r in range(2, 8))
    assert busy < 0.12 * 8000
    assert idle > 7 * busy


def test_power_of_two_breaks_ties_at_random() -> None:
    counts = pick_counts(PowerOfTwo(seed=3), [4, 9], [2, 2], 2000)
    assert 850 < counts[4] < 1150, counts


def test_power_of_two_with_one_candidate_returns_it() -> None:
    assert PowerOfTwo(seed=0).choose([7], [100]) == 7


def test_seeded_power_of_two_is_reproducible() -> None:
    loads = [3, 1, 4, 1, 5, 9, 2, 6]
    a, b = PowerOfTwo(seed=11), PowerOfTwo(seed=11)
    picks = [a.choose(range(8), loads) for _ in range(50)]
    assert picks == [b.choose(range(8), loads) for _ in range(50)]
    assert len(set(picks)) > 1


# --- Random ----------------------------------------------------------------------------------


def test_random_ignores_load_and_reaches_every_candidate() -> None:
    counts = pick_counts(Random(seed=4), [0, 1, 2, 3], [50, 0, 0, 0], 4000)
    assert all(850 < counts[r] < 1150 for r in range(4)), counts


# --- RoundRobin ------------------------------------------------------------------------------


@given(n=st.integers(1, 10), rounds=st.integers(1, 5))
def test_round_robin_gives_each_candidate_an_equal_share(n: int, rounds: int) -> None:
    policy = RoundRobin()
    counts = pick_counts(policy, range(n), [0] * n, n * rounds)
    assert counts == Counter({r: rounds for r in range(n)})


def test_round_robin_cycles_in_rank_order_regardless_of_candidate_order() -> None:
    policy = RoundRobin()
    assert [policy.choose([3, 1, 2], [0, 0, 0]) for _ in range(4)] == [1, 2, 3, 1]


def test_round_robin_skips_a_removed_rank_and_keeps_its_place() -> None:
    policy = RoundRobin()
    picks = [policy.choose([0, 1, 2, 3], [0] * 4) for _ in range(2)]
    picks += [policy.choose([0, 1, 3], [0] * 3) for _ in range(3)]  # rank 2 died
    picks += [policy.choose([0, 1, 2, 3], [0] * 4) for _ in range(3)]  # rank 2 is back
    assert picks == [0, 1, 3, 0, 1, 2, 3, 0]


# --- LeastLoaded -----------------------------------------------------------------------------


@given(case=candidates_and_loads())
def test_least_loaded_never_picks_a_rank_busier_than_another(
    case: tuple[list[int], list[int]],
) -> None:
    candidates, loads = case
    chosen = LeastLoaded().choose(candidates, loads)
    assert loads[candidates.index(chosen)] == min(loads)


def test_least_loaded_spreads_ties_round_robin() -> None:
    policy = LeastLoaded()
    assert [policy.choose([0, 1, 2, 3], [1, 0, 1, 0]) for _ in range(4)] == [1, 3, 1, 3]


# --- Affinity --------------------------------------------------------------------------------


def test_affinity_sends_a_key_to_the_same_rank_every_time() -> None:
    policy = Affinity()
    for key in ["lora-a", "lora-b", 17, ("user", 3)]:
        picks = {policy.choose(range(8), [0] * 8, key) for _ in range(20)}
        assert len(picks) == 1


def test_affinity_spreads_distinct_keys_over_all_ranks() -> None:
    policy = Affinity()
    counts = Counter(policy.choose(range(4), [0] * 4, f"key-{i}") for i in range(2000))
    assert all(400 < counts[r] < 600 for r in range(4)), counts


def test_affinity_preferred_rank_is_kept_up_to_the_imbalance_bound() -> None:
    policy = Affinity(max_imbalance=2)
    first, second = policy.preference("adapter", range(4))[:2]
    loads = [1] * 4
    loads[first] = 3  # exactly min + max_imbalance: still acceptable
    assert policy.choose(range(4), loads, "adapter") == first
    loads[first] = 4  # one past the bound: spill to the key's next rank
    assert policy.choose(range(4), loads, "adapter") == second


@given(
    case=candidates_and_loads(), key=st.text(max_size=8) | st.integers(), bound=st.integers(0, 4)
)
def test_affinity_takes_the_first_preferred_rank_within_the_bound(
    case: tuple[list[int], list[int]], key: Hashable, bound: int
) -> None:
    candidates, loads = case
    policy = Affinity(max_imbalance=bound)
    load = dict(zip(candidates, loads, strict=True))
    chosen = policy.choose(candidates, loads, key)
    limit = min(loads) + bound
    assert load[chosen] <= limit
    order = policy.preference(key, candidates)
    assert all(load[r] > limit for r in order[: order.index(chosen)])


def test_affinity_removing_a_rank_moves_only_that_ranks_keys() -> None:
    policy = Affinity()
    keys = [f"request-{i}" for i in range(1000)]
    before = {k: policy.choose(range(8), [0] * 8, k) for k in keys}
    survivors = [r for r in range(8) if r != 5]
    after = {k: policy.choose(survivors, [0] * 7, k) for k in keys}
    moved = {k for k in keys if before[k] != after[k]}
    assert moved == {k for k in keys if before[k] == 5}
    assert moved  # rank 5 did own some keys


def test_affinity_equal_keys_share_a_rank() -> None:
    policy = Affinity()
    assert policy.preference(1, range(16)) == policy.preference(1.0, range(16))
    assert policy.preference(1, range(16)) == policy.preference(True, range(16))


def test_affinity_rejects_keys_without_a_stable_encoding() -> None:
    with pytest.raises(TypeError, match="affinity key must be"):
        Affinity().choose([0, 1], [0, 0], frozenset({1}))


def test_affinity_without_key_routes_like_power_of_two() -> None:
    counts = pick_counts(Affinity(seed=5), [0, 1, 2], [40, 0, 0], 600)
    assert counts[0] == 0
    assert counts[1] > 200
    assert counts[2] > 200


def test_affinity_preference_is_the_same_in_another_process() -> None:
    # Built-in hash() of str is salted per process; the preference order must not be.
    keys = ["alpha", "beta", ("x", 2), b"raw", 3.5]
    here = [Affinity().preference(k, range(12)) for k in keys]
    code = (
        "from actormesh._pure._routing import Affinity;"
        f"print([Affinity().preference(k, range(12)) for k in {keys!r}])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == repr(here)


def test_affinity_rejects_a_negative_imbalance() -> None:
    with pytest.raises(ValueError, match="max_imbalance"):
        Affinity(max_imbalance=-1)


# --- WorkQueue -------------------------------------------------------------------------------


def test_work_queue_only_offers_ranks_below_capacity() -> None:
    policy = WorkQueue(capacity=1)
    assert policy.choose([0, 1, 2], [1, 0, 1]) == 1


def test_work_queue_raises_no_capacity_when_every_rank_is_full() -> None:
    with pytest.raises(NoCapacity, match="all 2 ranks have 2 or more calls in flight"):
        WorkQueue(capacity=2).choose([0, 1], [2, 3])


def test_work_queue_prefers_the_least_loaded_eligible_rank() -> None:
    assert WorkQueue(capacity=4).choose([0, 1, 2], [3, 1, 2]) == 1


def test_work_queue_fills_idle_ranks_in_turn() -> None:
    policy = WorkQueue(capacity=1)
    in_flight = [0, 0, 0]
    for _ in range(3):
        in_flight[policy.choose([0, 1, 2], in_flight)] += 1
    assert in_flight == [1, 1, 1]
    with pytest.raises(NoCapacity):
        policy.choose([0, 1, 2], in_flight)


def test_work_queue_rejects_capacity_below_one() -> None:
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        WorkQueue(capacity=0)


def test_no_capacity_survives_pickling() -> None:
    err = pickle.loads(pickle.dumps(NoCapacity("full")))
    assert isinstance(err, NoCapacity)
    assert str(err) == "full"


# --- policy_from -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("affinity", Affinity),
        ("least_loaded", LeastLoaded),
        ("power_of_two", PowerOfTwo),
        ("random", Random),
        ("round_robin", RoundRobin),
        ("work_queue", WorkQueue),
    ],
)
def test_policy_from_builds_a_policy_by_name(name: str, cls: type) -> None:
    assert type(policy_from(name)) is cls


def test_policy_from_returns_a_policy_object_unchanged() -> None:
    policy = LeastLoaded()
    assert policy_from(policy) is policy


def test_policy_from_none_is_power_of_two() -> None:
    assert isinstance(policy_from(None), PowerOfTwo)


def test_policy_from_accepts_a_user_policy() -> None:
    class Last:
        def choose(
            self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
        ) -> int:
            return candidates[-1]

    policy = Last()
    assert policy_from(policy) is policy


def test_policy_from_lists_valid_names_for_an_unknown_one() -> None:
    with pytest.raises(ValueError, match="unknown choose policy 'fastest'") as info:
        policy_from("fastest")
    for name in POLICY_NAMES:
        assert repr(name) in str(info.value)


def test_policy_from_rejects_objects_without_choose() -> None:
    with pytest.raises(TypeError, match="choose"):
        policy_from(42)  # type: ignore[arg-type]


def test_routing_imports_neither_numpy_nor_torch() -> None:
    code = (
        "import sys, actormesh._pure._routing, actormesh._pure._sharding;"
        "print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_policy_says_whether_a_keyed_call_is_its_to_route() -> None:
    from actormesh._api._choose import keyed

    class KeyBlind:
        uses_key = False

        def choose(self, candidates: Any, in_flight: Any, key: Hashable | None = None) -> int:
            return int(candidates[0])

    class KeyAware:  # says nothing: it gets the key
        def choose(self, candidates: Any, in_flight: Any, key: Hashable | None = None) -> int:
            return int(candidates[-1])

    affinity = Affinity()
    for policy in (KeyBlind(), PowerOfTwo(), RoundRobin(), WorkQueue()):
        assert keyed(policy, "user-3", lambda: affinity) is affinity
        assert keyed(policy, None, lambda: affinity) is policy
    aware = KeyAware()
    assert keyed(aware, "user-3", lambda: affinity) is aware
    assert takes_key(aware) and takes_key(affinity) and not takes_key(LeastLoaded())
