"""The topology of a tree of host agents (``_hosts/_tree.py``): who relays to whom."""

from __future__ import annotations

import pytest

from actormesh import host_mesh
from actormesh._config import Config
from actormesh._hosts._tree import (
    ROOT,
    check_fan_out,
    children,
    depth,
    live_children,
    live_parent,
    parent,
    plan,
    subtree,
)

pytestmark = pytest.mark.timeout(30)


def test_every_host_has_one_parent_and_is_its_childs_parent() -> None:
    for hosts, k in ((1, 2), (8, 2), (32, 4), (100, 16), (1000, 16)):
        seen = []
        for index in [ROOT, *range(hosts)]:
            for child in children(index, hosts, k):
                assert parent(child, k) == index
                seen.append(child)
        assert sorted(seen) == list(range(hosts))  # each exactly once
        assert len(children(ROOT, hosts, k)) == min(k, hosts)


def test_the_tree_is_a_heap_of_fan_out_k() -> None:
    assert list(children(ROOT, 8, 2)) == [0, 1]
    assert list(children(0, 8, 2)) == [2, 3]
    assert list(children(2, 8, 2)) == [6, 7]
    assert list(children(3, 8, 2)) == []
    assert subtree(0, 8, 2) == [0, 2, 3, 6, 7]
    assert subtree(ROOT, 5, 2) == [0, 1, 2, 3, 4]
    assert [depth(n, 4) for n in (1, 4, 5, 20, 21, 32, 84, 85)] == [1, 1, 2, 2, 3, 3, 3, 4]
    assert depth(10_000, 16) == 4


def test_a_plan_reaches_the_touched_hosts_through_their_ancestors_only() -> None:
    assert plan([7], 2) == {ROOT: [0], 0: [2], 2: [7]}
    assert plan([0, 1], 2) == {ROOT: [0, 1]}
    full = plan(range(8), 2)
    assert full == {ROOT: [0, 1], 0: [2, 3], 1: [4, 5], 2: [6, 7]}
    assert plan([], 2) == {}
    # A slice of the last hosts of 32 with fan-out 4: nothing under hosts 1..3.
    assert plan([30, 31], 4) == {ROOT: [0], 0: [6], 6: [30, 31]}


def test_a_dead_hosts_children_hang_under_its_nearest_live_ancestor() -> None:
    dead = {0}
    assert live_parent(2, 2, dead) == ROOT
    assert live_parent(6, 2, dead) == 2
    assert live_children(ROOT, 8, 2, dead) == [2, 3, 1]
    assert plan([6, 3, 5], 2, dead) == {ROOT: [1, 2, 3], 2: [6], 1: [5]}
    dead = {0, 2}
    assert live_parent(7, 2, dead) == ROOT
    assert plan([7, 3], 2, dead) == {ROOT: [3, 7]}


@pytest.mark.parametrize("bad", [1, 0, -3, 2.0, True, "4", None])
def test_a_fan_out_is_an_int_of_at_least_two(bad: object) -> None:
    with pytest.raises(ValueError, match="fan_out must be an int >= 2"):
        check_fan_out(bad)
    if bad is not None:
        with pytest.raises(ValueError, match="fan_out must be an int >= 2"):
            host_mesh(4, fan_out=bad)  # type: ignore[arg-type]
    assert check_fan_out(2) == 2


def test_the_fan_out_setting() -> None:
    assert Config().fan_out == 16
    assert Config.from_env({"ACTORMESH_FAN_OUT": "4"}).fan_out == 4
    with pytest.raises(ValueError, match="fan_out must be an int >= 2"):
        Config(fan_out=1)
