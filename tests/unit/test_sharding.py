"""Shard dispatch: splitting arguments over a mesh and collecting the results."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from actormesh._pure._sharding import (
    CallbackDispatch,
    Dispatch,
    SplitAlong,
    as_dispatch,
    concat,
    first_of_replicas,
    split_along,
    value_mesh,
)
from actormesh._shape import Shape, ValueMesh

DP4 = Shape.from_dims(("dp",), (4,))
DP2_TP2 = Shape.from_dims(("dp", "tp"), (2, 2))


def run_echo(dispatch: Dispatch, shape: Shape, *args: Any, **kwargs: Any) -> Any:
    """Split, let every point return its first argument, and collect."""
    calls = dispatch.split(shape, args, kwargs)
    return dispatch.collect(ValueMesh(shape, [a[0] for a, _ in calls]))


# --- split -----------------------------------------------------------------------------------


def test_split_gives_each_point_its_contiguous_chunk_of_a_list() -> None:
    calls = split_along().split(DP4, (list(range(8)),), {})
    assert [args for args, _ in calls] == [([0, 1],), ([2, 3],), ([4, 5],), ([6, 7],)]


def test_split_cuts_keyword_arguments_too() -> None:
    calls = split_along().split(DP4, (), {"batch": (10, 11, 12, 13)})
    assert [kw["batch"] for _, kw in calls] == [(10,), (11,), (12,), (13,)]


def test_split_replicates_arguments_that_are_not_batches() -> None:
    config = {"lr": 0.1}
    Record = namedtuple("Record", "a b")
    record = Record(1, 2)
    scalar = torch.tensor(3.0)
    calls = split_along().split(
        DP4, ([1, 2, 3, 4], 7, "text", None, record, scalar), {"config": config}
    )
    for args, kwargs in calls:
        assert args[1:] == (7, "text", None, record, scalar)
        assert args[4] is record
        assert args[5] is scalar
        assert kwargs["config"] is config


def test_split_along_dp_replicates_chunks_along_tp() -> None:
    calls = split_along("dp").split(DP2_TP2, (["a", "b", "c", "d"],), {"step": 3})
    # Row-major points: (dp0,tp0), (dp0,tp1), (dp1,tp0), (dp1,tp1).
    assert calls == [
        ((["a", "b"],), {"step": 3}),
        ((["a", "b"],), {"step": 3}),
        ((["c", "d"],), {"step": 3}),
        ((["c", "d"],), {"step": 3}),
    ]


def test_split_along_tp_replicates_chunks_along_dp() -> None:
    calls = split_along("tp").split(DP2_TP2, ([1, 2],), {})
    assert [args[0] for args, _ in calls] == [[1], [2], [1], [2]]


def test_split_of_a_sliced_shape_uses_its_own_coordinates() -> None:
    sliced = Shape.from_dims(("dp",), (6,)).slice(dp=slice(2, 5))
    calls = split_along().split(sliced, ([1, 2, 3],), {})
    assert [args[0] for args, _ in calls] == [[1], [2], [3]]


def test_split_of_a_numpy_array_gives_views() -> None:
    array = np.arange(12).reshape(6, 2)
    calls = split_along("dp").split(DP2_TP2, (array,), {})
    chunks = [args[0] for args, _ in calls]
    assert [c.shape for c in chunks] == [(3, 2)] * 4
    assert all(np.shares_memory(c, array) for c in chunks)
    np.testing.assert_array_equal(chunks[2], array[3:])


def test_split_of_a_torch_tensor_gives_views() -> None:
    tensor = torch.arange(8.0)
    calls = split_along().split(DP4, (), {"x": tensor})
    chunks = [kw["x"] for _, kw in calls]
    chunks[1][0] = -1.0  # writes through to the original: no copy was made
    assert tensor[2].item() == -1.0
    assert [c.tolist() for c in chunks] == [[0.0, 1.0], [-1.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


def test_uneven_split_without_pad_names_the_argument_length_and_shards() -> None:
    with pytest.raises(ValueError, match=r"argument 'batch' has length 5.*into 4 shards"):
        split_along().split(DP4, (), {"batch": [1, 2, 3, 4, 5]})
    with pytest.raises(ValueError, match=r"positional argument 1 has length 3.*into 4 shards"):
        split_along().split(DP4, ([1, 2, 3, 4], np.zeros(3)), {})


def test_pad_gives_the_earlier_shards_one_extra_item() -> None:
    calls = split_along(pad=True).split(DP4, (list(range(10)),), {})
    assert [len(args[0]) for args, _ in calls] == [3, 3, 2, 2]


def test_pad_with_fewer_items_than_shards_leaves_trailing_shards_empty() -> None:
    calls = split_along(pad=True).split(DP4, (torch.ones(2),), {})
    assert [len(args[0]) for args, _ in calls] == [1, 1, 0, 0]


def test_split_along_an_unknown_dimension_lists_the_dimensions() -> None:
    with pytest.raises(ValueError, match=r"does not have dimension 'pp'.*'dp', 'tp'"):
        split_along("pp").split(DP2_TP2, ([1, 2],), {})


def test_split_without_dim_on_a_multi_dimensional_shape_asks_for_one() -> None:
    with pytest.raises(ValueError, match=r"'dp', 'tp'.*dim="):
        split_along().split(DP2_TP2, ([1, 2],), {})


@given(
    length=st.integers(0, 40),
    dp=st.integers(1, 6),
    tp=st.integers(1, 3),
    as_tuple=st.booleans(),
)
def test_split_chunks_concatenate_back_to_the_input(
    length: int, dp: int, tp: int, as_tuple: bool
) -> None:
    shape = Shape.from_dims(("dp", "tp"), (dp, tp))
    batch: list[int] | tuple[int, ...] = tuple(range(length)) if as_tuple else list(range(length))
    calls = split_along("dp", pad=True).split(shape, (batch,), {})
    assert len(calls) == len(shape)  # every point gets exactly one call
    chunks = [args[0] for args, _ in calls]
    for point, chunk in zip(shape.points(), chunks, strict=True):
        assert chunk == chunks[point["dp"] * tp]  # replicas along tp get the same chunk
    assert run_echo(split_along("dp", pad=True), shape, batch) == batch


@given(length=st.integers(0, 40), shards=st.integers(1, 8))
def test_padded_split_matches_numpy_array_split(length: int, shards: int) -> None:
    array = np.arange(length)
    calls = split_along(pad=True).split(Shape.from_dims(("dp",), (shards,)), (array,), {})
    expected = np.array_split(array, shards)
    for (args, _), want in zip(calls, expected, strict=True):
        np.testing.assert_array_equal(args[0], want)


@given(per_shard=st.integers(0, 5), shards=st.integers(1, 6))
def test_tensor_round_trip_through_split_and_concat(per_shard: int, shards: int) -> None:
    tensor = torch.randn(per_shard * shards, 3)
    result = run_echo(split_along(), Shape.from_dims(("dp",), (shards,)), tensor)
    assert torch.equal(result, tensor)


# --- collect ---------------------------------------------------------------------------------


def mesh_2x2(values: list[Any]) -> ValueMesh[Any]:
    return ValueMesh(DP2_TP2, values)


def test_concat_chains_lists_of_the_first_replica_of_each_group() -> None:
    results = mesh_2x2([[1, 2], ["tp1"], [3], ["tp1"]])
    assert concat(results, "dp") == [1, 2, 3]


def test_concat_keeps_tuples_as_a_tuple() -> None:
    assert concat(ValueMesh(DP4, [(1,), (2,), (), (3,)])) == (1, 2, 3)


def test_concat_joins_numpy_arrays() -> None:
    results = mesh_2x2([np.array([1]), np.array([9]), np.array([2, 3]), np.array([9])])
    np.testing.assert_array_equal(concat(results, "dp"), np.array([1, 2, 3]))


def test_concat_joins_torch_tensors() -> None:
    results = ValueMesh(DP4, [torch.tensor([float(i)]) for i in range(4)])
    assert torch.equal(concat(results), torch.tensor([0.0, 1.0, 2.0, 3.0]))


def test_concat_of_scalars_suggests_another_collect() -> None:
    with pytest.raises(TypeError, match=r"got float, int.*first_of_replicas"):
        concat(ValueMesh(DP4, [1, 2.0, 3, 4]))


def test_first_of_replicas_keeps_one_value_per_group_in_order() -> None:
    results = mesh_2x2(["dp0-tp0", "dp0-tp1", "dp1-tp0", "dp1-tp1"])
    assert first_of_replicas(results, "dp") == ["dp0-tp0", "dp1-tp0"]
    assert first_of_replicas(results, "tp") == ["dp0-tp0", "dp0-tp1"]


def test_value_mesh_returns_the_results_unchanged() -> None:
    results = mesh_2x2([0.5, 0.5, 0.25, 0.25])
    assert value_mesh(results, "dp") is results


@pytest.mark.parametrize(
    ("collect", "expected"),
    [("concat", [1, 2]), ("first_of_replicas", [[1], [2]]), ("value_mesh", None)],
)
def test_split_along_collects_with_the_named_function(collect: Any, expected: Any) -> None:
    results = mesh_2x2([[1], [1], [2], [2]])
    collected = split_along("dp", collect=collect).collect(results)
    assert collected == (results if expected is None else expected)


def test_split_along_passes_results_and_dim_to_a_custom_collect() -> None:
    seen: list[tuple[ValueMesh[Any], str]] = []

    def total(results: ValueMesh[Any], dim: str) -> int:
        seen.append((results, dim))
        return sum(results.values())

    results = ValueMesh(DP4, [1, 2, 3, 4])
    assert split_along(collect=total).collect(results) == 10
    assert seen == [(results, "dp")]


def test_split_along_rejects_an_unknown_collect_name() -> None:
    with pytest.raises(ValueError, match=r"unknown collect 'sum'.*'concat'"):
        split_along(collect="sum")  # type: ignore[arg-type]


# --- as_dispatch -----------------------------------------------------------------------------


def test_as_dispatch_uses_a_dispatch_as_is() -> None:
    dispatch = split_along("dp", pad=True)
    assert as_dispatch(dispatch) is dispatch


def test_as_dispatch_defaults_to_splitting_along_the_only_dimension() -> None:
    dispatch = as_dispatch(None)
    assert isinstance(dispatch, SplitAlong)
    assert dispatch == split_along()


def test_as_dispatch_wraps_a_ray_style_function_that_makes_the_calls() -> None:
    def dispatch_fn(mesh: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
        return (mesh, method_name, args, kwargs)

    wrapped = as_dispatch(dispatch_fn)
    assert isinstance(wrapped, CallbackDispatch)
    assert wrapped.invoke("mesh", "step", (1, 2), {"k": 3}) == ("mesh", "step", (1, 2), {"k": 3})


def test_as_dispatch_rejects_what_is_not_callable() -> None:
    with pytest.raises(TypeError, match="dispatch must be"):
        as_dispatch("split")  # type: ignore[arg-type]


def test_the_default_collect_joins_batches_and_lists_scalars() -> None:
    dispatch = as_dispatch(None)
    assert dispatch.collect(ValueMesh(DP4, [[1], [2], [3], [4]])) == [1, 2, 3, 4]
    # Scalars (a loss per shard) cannot be joined: one per data-parallel group instead.
    by_dp = split_along("dp")
    assert by_dp.collect(ValueMesh(DP2_TP2, [0.5, 0.5, 0.25, 0.25])) == [0.5, 0.25]
    # An explicit "concat" stays strict.
    with pytest.raises(TypeError, match="concat needs"):
        split_along(collect="concat").collect(ValueMesh(DP4, [1.0, 2.0, 3.0, 4.0]))
