"""``Extent``, ``Point`` and ``ValueMesh``, and the shape questions every mesh answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from actormesh.actor import Extent, Point, ProcMesh, ValueMesh, this_host

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo
else:
    from monarch_actors import Echo


@pytest.fixture(scope="module")
def ranks(echo: Echo) -> ValueMesh[int]:
    """Each actor's flat rank, over ``{nodes: 2, gpus: 2}``."""
    return echo.rank.call().get(timeout=30)


def test_an_extent_maps_labels_to_sizes() -> None:
    extent = Extent(["hosts", "gpus"], [2, 3])
    assert extent.labels == ["hosts", "gpus"]
    assert extent.sizes == [2, 3]
    assert extent.nelements == 6
    assert len(extent) == 2
    assert extent["gpus"] == 3
    assert list(extent) == ["hosts", "gpus"]
    assert dict(extent) == {"hosts": 2, "gpus": 3}
    assert repr(extent) == "{hosts: 2, gpus: 3}"
    assert extent == Extent(["hosts", "gpus"], [2, 3])
    assert extent != Extent(["hosts", "gpus"], [2, 4])


def test_a_point_is_a_rank_in_an_extent() -> None:
    extent = Extent(["hosts", "gpus"], [2, 3])
    build: Any = Point
    point = build(4, extent)
    assert dict(point) == {"hosts": 1, "gpus": 1}
    assert point.rank == 4
    assert point.extent == extent
    assert point == build(4, extent)


def test_the_points_of_a_value_mesh_are_mappings_with_a_rank(ranks: ValueMesh[int]) -> None:
    point, value = list(ranks.items())[3]
    assert isinstance(point, Point)
    assert value == 3
    assert dict(point) == {"nodes": 1, "gpus": 1}
    assert list(point) == ["nodes", "gpus"]
    assert list(point.keys()) == ["nodes", "gpus"]
    assert point["nodes"] == 1
    assert len(point) == 2
    assert point.rank == 3
    assert point.extent == Extent(["nodes", "gpus"], [2, 2])
    assert point.size("gpus") == 2


def test_a_missing_dimension_of_a_point_raises_value_error(ranks: ValueMesh[int]) -> None:
    point = next(iter(ranks.items()))[0]
    with pytest.raises(ValueError, match="zzz"):
        _ = point["zzz"]
    with pytest.raises(ValueError, match="zzz"):
        point.size("zzz")


def test_a_value_mesh_has_the_shape_of_the_call(ranks: ValueMesh[int]) -> None:
    assert isinstance(ranks, ValueMesh)
    assert len(ranks) == 4
    assert dict(ranks.extent) == {"nodes": 2, "gpus": 2}
    assert ranks.sizes == {"nodes": 2, "gpus": 2}
    assert ranks.size() == 4
    assert ranks.size("gpus") == 2


def test_items_and_iteration_give_points_and_values_in_rank_order(ranks: ValueMesh[int]) -> None:
    expected = [
        ({"nodes": 0, "gpus": 0}, 0),
        ({"nodes": 0, "gpus": 1}, 1),
        ({"nodes": 1, "gpus": 0}, 2),
        ({"nodes": 1, "gpus": 1}, 3),
    ]
    assert [(dict(p), v) for p, v in ranks.items()] == expected
    assert [(dict(p), v) for p, v in ranks] == expected


def test_values_is_a_list_in_rank_order(ranks: ValueMesh[int]) -> None:
    values = ranks.values()
    assert isinstance(values, list)
    assert values == [0, 1, 2, 3]


def test_item_and_get_pick_one_value(ranks: ValueMesh[int]) -> None:
    assert ranks.item(nodes=1, gpus=0) == 2
    assert ranks.item(nodes=0, gpus=1) == 1
    assert ranks.get(3) == 3
    assert ranks.slice(nodes=1, gpus=1).item() == 3


def test_item_needs_exactly_the_dimensions_of_the_mesh(ranks: ValueMesh[int]) -> None:
    with pytest.raises(KeyError):
        ranks.item(nodes=0)
    with pytest.raises(KeyError):
        ranks.item(nodes=0, gpus=0, zzz=0)


def test_a_value_mesh_slices_like_its_mesh(ranks: ValueMesh[int]) -> None:
    column = ranks.slice(gpus=1)
    assert isinstance(column, ValueMesh)
    assert dict(column.extent) == {"nodes": 2}
    assert column.values() == [1, 3]
    assert [dict(p) for p, _ in column.items()] == [{"nodes": 0}, {"nodes": 1}]
    kept = ranks.slice(nodes=slice(1, 2))
    assert dict(kept.extent) == {"nodes": 1, "gpus": 2}
    assert kept.values() == [2, 3]
    one = ranks.slice(nodes=1, gpus=1)
    assert dict(one.extent) == {}
    assert one.values() == [3]


def test_flatten_split_and_rename_keep_the_values_in_order(ranks: ValueMesh[int]) -> None:
    flat = ranks.flatten("x")
    assert dict(flat.extent) == {"x": 4}
    assert [(dict(p), v) for p, v in flat.items()] == [({"x": i}, i) for i in range(4)]
    split = ranks.split(nodes=("a", "b"), b=1)
    assert dict(split.extent) == {"a": 2, "b": 1, "gpus": 2}
    assert split.values() == [0, 1, 2, 3]
    assert split.item(a=1, b=0, gpus=1) == 3
    renamed = ranks.rename(gpus="g")
    assert dict(renamed.extent) == {"nodes": 2, "g": 2}
    assert renamed.item(nodes=1, g=0) == 2


def test_an_index_out_of_range_raises_index_error(ranks: ValueMesh[int], echo: Echo) -> None:
    with pytest.raises(IndexError):
        ranks.slice(gpus=5)
    with pytest.raises(IndexError):
        echo.slice(gpus=5)


def test_the_size_of_an_unknown_dimension_raises_key_error(
    ranks: ValueMesh[int], echo: Echo, procs: ProcMesh
) -> None:
    with pytest.raises(KeyError):
        ranks.size("nope")
    with pytest.raises(KeyError):
        echo.size("nope")
    with pytest.raises(KeyError):
        procs.size("nope")


@pytest.mark.parametrize("what", ["value_mesh", "actor_mesh", "proc_mesh", "this_host"])
def test_slicing_an_unknown_dimension_raises_type_error(
    what: str, ranks: ValueMesh[int], echo: Echo, procs: ProcMesh
) -> None:
    meshes: dict[str, Any] = {
        "value_mesh": ranks,
        "actor_mesh": echo,
        "proc_mesh": procs,
        "this_host": this_host(),
    }
    with pytest.raises(TypeError, match="does not have dimension"):
        meshes[what].slice(nope=0)
