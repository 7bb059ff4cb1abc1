"""``context()``, ``current_rank()``, ``current_size()`` and ``current_actor_name()``.

As in Monarch 0.7: ``context().actor_instance.rank`` is the actor's place in the mesh it
was spawned on, while ``context().message_rank`` (and ``current_rank()``) is its place in
the slice the message was sent to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from actormesh.actor import (
    Context,
    context,
    current_actor_name,
    current_rank,
    current_size,
    this_host,
)

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo, Introspects
else:
    from monarch_actors import Echo, Introspects

WHOLE = {"nodes": 2, "gpus": 2}


def test_the_controller_has_the_root_context() -> None:
    ctx = context()
    assert isinstance(ctx, Context)
    instance = ctx.actor_instance
    assert instance.name == "root"
    assert instance.class_name is None
    assert dict(instance.rank) == {}
    assert instance.rank.rank == 0
    assert dict(ctx.message_rank) == {}
    assert dict(current_rank()) == {}
    assert current_rank().rank == 0
    assert current_size() == {}
    assert current_actor_name() == str(instance.actor_id)


def test_a_call_to_the_whole_mesh_gives_each_actor_its_place(echo: Echo) -> None:
    answers = echo.identity.call().get(timeout=30)
    for flat, (point, identity) in enumerate(answers.items()):
        assert identity["rank"] == dict(point)
        assert identity["flat_rank"] == flat
        assert identity["message_rank"] == dict(point)
        assert identity["message_flat_rank"] == flat
        assert identity["current_rank"] == dict(point)
        assert identity["current_size"] == WHOLE


def test_message_rank_is_relative_to_the_slice_called(echo: Echo) -> None:
    answers = echo.slice(nodes=1).identity.call().get(timeout=30).values()
    assert [a["rank"] for a in answers] == [{"nodes": 1, "gpus": 0}, {"nodes": 1, "gpus": 1}]
    assert [a["flat_rank"] for a in answers] == [2, 3]
    assert [a["message_rank"] for a in answers] == [{"gpus": 0}, {"gpus": 1}]
    assert [a["message_flat_rank"] for a in answers] == [0, 1]
    assert [a["current_rank"] for a in answers] == [{"gpus": 0}, {"gpus": 1}]
    assert [a["current_size"] for a in answers] == [{"gpus": 2}, {"gpus": 2}]


def test_a_single_actor_slice_has_an_empty_message_rank(echo: Echo) -> None:
    identity = echo.slice(nodes=1, gpus=0).identity.call_one().get(timeout=30)
    assert identity["rank"] == {"nodes": 1, "gpus": 0}
    assert identity["message_rank"] == {}
    assert identity["current_rank"] == {}
    assert identity["current_size"] == {}


def test_a_kept_dimension_of_a_slice_is_renumbered(echo: Echo) -> None:
    answers = echo.slice(gpus=slice(1, 2)).identity.call().get(timeout=30).values()
    assert [a["rank"] for a in answers] == [{"nodes": 0, "gpus": 1}, {"nodes": 1, "gpus": 1}]
    assert [a["message_rank"] for a in answers] == [
        {"nodes": 0, "gpus": 0},
        {"nodes": 1, "gpus": 0},
    ]
    assert [a["current_size"] for a in answers] == [{"nodes": 2, "gpus": 1}] * 2


def test_current_rank_in_init_is_the_place_in_the_whole_mesh(echo: Echo) -> None:
    answers = echo.slice(gpus=0).identity.call().get(timeout=30).values()
    assert [a["init_rank"] for a in answers] == [a["rank"] for a in answers]
    assert [a["init_rank"] for a in answers] == [{"nodes": 0, "gpus": 0}, {"nodes": 1, "gpus": 0}]


def test_the_actor_instance_is_named_after_the_spawn(echo: Echo) -> None:
    names = [a["name"] for a in echo.identity.call().get(timeout=30).values()]
    assert names == ["echo"] * 4


def test_the_actor_instance_class_name_is_module_qualified(echo: Echo) -> None:
    identity = echo.slice(nodes=0, gpus=0).identity.call_one().get(timeout=30)
    assert identity["class_name"] == "monarch_actors.Echo"


def test_each_actor_has_its_own_actor_id_and_name(echo: Echo) -> None:
    answers = echo.identity.call().get(timeout=30).values()
    ids = [a["actor_id"] for a in answers]
    assert [a["actor_name"] for a in answers] == ids  # current_actor_name() = str(actor_id)
    assert len(set(ids)) == 4
    assert all("echo" in actor_id for actor_id in ids)
    assert str(context().actor_instance.actor_id) not in ids


def test_a_missing_dimension_of_the_current_rank_raises_value_error() -> None:
    # In Monarch, current_rank()["gpus"] after slice(gpus=1) raises this error.
    with pytest.raises(ValueError, match="gpus"):
        _ = current_rank()["gpus"]


def test_ranks_instances_and_log_records_read_as_in_monarch() -> None:
    procs = this_host().spawn_procs(per_host={"hosts": 1, "gpus": 2})
    try:
        seen = procs.spawn("introspects", Introspects).describe.call().get(timeout=30)
        got = seen.item(hosts=0, gpus=1)
    finally:
        procs.stop().get(timeout=30)
    assert got["rank"] == "{'hosts': 0/1, 'gpus': 1/2}"
    name = "<root>.<monarch_actors.Introspects introspects{'hosts': 0/1, 'gpus': 1/2}>"
    assert got["instance"] == name
    assert got["creator"] == "root"
    # A log record made in an actor names it, whatever handler writes it; an empty one
    # (torch's structured logging) is left alone.
    assert got["logged"] == [f"[actor={name}] checked in", ""]
    assert str(context().actor_instance) == "<root>"
