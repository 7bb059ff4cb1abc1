"""Ranks (issue 2, point 7): current_rank(), current_size() and the rank environment."""

from __future__ import annotations

import pytest
from integration_actors import Echo, Relay

from actormesh import ActorMesh, Point, ProcMesh, current_rank, current_size
from actormesh.testing import run


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("ranked", Echo)  # type: ignore[return-value]


@pytest.mark.parametrize("endpoint", ["whoami", "whoami_sync"])
def test_each_actor_knows_its_rank_and_coordinates(echo: ActorMesh[Echo], endpoint: str) -> None:
    identities = getattr(echo, endpoint).call().get(timeout=30)
    for point, identity in identities.items():
        assert identity["rank"] == identity["init_rank"] == point.rank
        assert identity["point"] == dict(point)
        assert identity["size"] == {"dp": 2, "tp": 2}


def test_every_actor_process_sees_its_rank_in_the_environment(echo: ActorMesh[Echo]) -> None:
    identities = echo.whoami.call().get(timeout=30)
    for point, identity in identities.items():
        assert identity["env_rank"] == point.rank
        assert identity["env_coords"] == dict(point)


def test_current_rank_unpacks_as_slice_keywords_to_pair_peers(procs: ProcMesh) -> None:
    async def main() -> list[dict[str, object]]:
        relay = await procs.spawn("pairing_relay", Relay)
        peers = await procs.spawn("pairing_peers", Echo)
        await relay.init.call(peers)
        return list((await relay.peer_identity.call()).values())

    answers = run(main())
    assert [a["rank"] for a in answers] == [0, 1, 2, 3]
    assert [a["point"] for a in answers] == [
        {"dp": 0, "tp": 0},
        {"dp": 0, "tp": 1},
        {"dp": 1, "tp": 0},
        {"dp": 1, "tp": 1},
    ]


def test_outside_any_actor_the_rank_is_the_single_point_of_no_dimensions() -> None:
    point = current_rank()
    assert isinstance(point, Point)
    assert point.rank == 0
    assert dict(point) == {}
    assert current_size() == {}


def test_current_rank_is_the_place_in_the_slice_called(procs: ProcMesh) -> None:
    # As Monarch's: a call to a slice gives ranks within it; context() keeps the whole.
    mesh = procs.spawn("message_ranks", Echo)
    row = mesh.slice(dp=1).whoami.call().get(timeout=30).values()
    assert [v["message_point"] for v in row] == [{"tp": 0}, {"tp": 1}]
    assert [v["message_size"] for v in row] == [{"tp": 2}, {"tp": 2}]
    assert [v["point"] for v in row] == [{"dp": 1, "tp": 0}, {"dp": 1, "tp": 1}]
    one = mesh.slice(dp=1, tp=0).whoami.call_one().get(timeout=30)
    assert one["message_point"] == {} and one["point"] == {"dp": 1, "tp": 0}
    whole = mesh.whoami.call().get(timeout=30).values()
    assert all(v["message_point"] == v["point"] for v in whole)
