"""``actormesh.ray``'s load accounting (issue 26): ``choose`` sees every call made through
the mesh, not only its own, so an actor kept busy by ``all()`` or by a call on its own
handle does not look idle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ray_actors import Member

from actormesh.ray import ActorMesh


def _by_actors_list(mesh: Any, gate: str) -> Any:
    return mesh.actors[0].hold_until.remote(gate, 120.0)


def _by_indexing(mesh: Any, gate: str) -> Any:
    return mesh[0].hold_until.options(name="busy").remote(gate, 120.0)


def _by_all_on_a_slice(mesh: Any, gate: str) -> Any:
    return mesh[0:1].methods.hold_until.all(gate, 120.0)[0]


@pytest.mark.parametrize("occupy", [_by_actors_list, _by_indexing, _by_all_on_a_slice])
def test_choose_counts_calls_made_outside_choose(
    ray_cluster: Any, tmp_path: Path, occupy: Callable[[Any, str], Any]
) -> None:
    members = ActorMesh(
        Member, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1}, choose="least_loaded"
    )
    try:
        gate = str(tmp_path / "open")
        busy = [occupy(members, gate), occupy(members, gate)]  # two calls on actor 0
        # Nothing ends before the gate opens, so the counts only grow: actor 0 has 2 in
        # flight, actor 1 has 0, then 1; least-loaded must pick actor 1 both times.
        picked = [members.methods.hold_until.choose(gate, 120.0) for _ in range(2)]
        Path(gate).touch()
        assert ray_cluster.get(busy, timeout=120) == [0, 0]
        assert ray_cluster.get(picked, timeout=120) == [1, 1]
        # Every call ended and is counted out (Ray runs the callbacks that count them on
        # its own thread, just after the results arrive: wait for the mesh's notice).
        load = members._load
        with load.changed:
            assert load.changed.wait_for(lambda: load.in_flight == [0, 0], timeout=120)
    finally:
        members.kill()
