"""Issue 6, point 3: ``shard`` with dispatch on the endpoint, per call, or Ray-style."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from groups_actors import Sharded

from actormesh import ValueMesh, actor_mesh, split_along


@pytest.fixture(scope="module")
def grid() -> Iterator[Any]:
    """Four actors on a ``{"dp": 2, "tp": 2}`` grid."""
    mesh = actor_mesh(Sharded, shape={"dp": 2, "tp": 2}, name="grid").get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def test_endpoint_dispatch_splits_along_dp_and_replicates_along_tp(grid: Any) -> None:
    out = grid.take.shard([10, 11, 12, 13], scale=3).get(timeout=30)
    # concat takes tp=0 of each dp group, in dp order: the batch back, with who handled it.
    assert out == [(0, 0, 10, 3), (0, 0, 11, 3), (1, 0, 12, 3), (1, 0, 13, 3)]
    every = grid.take.shard_with(split_along("dp", collect="value_mesh"))([1, 2]).get(timeout=30)
    assert isinstance(every, ValueMesh)
    assert [v for _, v in every.items()] == [
        [(0, 0, 1, 1)],
        [(0, 1, 1, 1)],
        [(1, 0, 2, 1)],
        [(1, 1, 2, 1)],
    ]


def test_tensors_and_arrays_split_as_views_and_join_back(grid: Any) -> None:
    tensor = torch.arange(8.0).reshape(4, 2)
    doubled = grid.double.shard_with(split_along("dp"))(tensor).get(timeout=30)
    assert torch.equal(doubled, tensor * 2)
    array = np.arange(6)
    assert np.array_equal(
        grid.double.shard_with(split_along("dp"))(array).get(timeout=30), array * 2
    )


def test_uneven_batches_need_pad_or_fail_at_the_call(grid: Any) -> None:
    with pytest.raises(ValueError, match="does not split evenly"):
        grid.double.shard_with(split_along("dp"))([1, 2, 3])
    padded = grid.rank_of.shard_with(split_along("dp", pad=True))([1, 2, 3]).get(timeout=30)
    assert padded == [0, 0, 2]  # dp=0 got two items, dp=1 one (tp=0 ranks: 0 and 2)


def test_first_of_replicas_returns_one_result_per_dp_group(grid: Any) -> None:
    collect = split_along("dp", collect="first_of_replicas")
    assert grid.rank_of.shard_with(collect)([5, 6]).get(timeout=30) == [[0], [2]]


def torch_dispatch_fn(mesh: Any, method_name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The proposal's example: chunk a tensor over the actors, call each, concatenate."""
    flat = mesh.flatten("rank")
    chunks = torch.chunk(tensor, flat.size())
    futures = [
        getattr(flat.slice(rank=i), method_name).call_one(chunk) for i, chunk in enumerate(chunks)
    ]
    return torch.cat([future.get(timeout=30) for future in futures])


def test_a_ray_style_dispatch_fn_makes_the_calls_itself(grid: Any) -> None:
    tensor = torch.arange(8)
    assert torch.equal(grid.double.shard_with(torch_dispatch_fn)(tensor).get(), tensor * 2)


def test_an_async_dispatch_fn_awaits_its_calls_on_the_runtime_loop(grid: Any) -> None:
    async def gather_ranks(mesh: Any, method_name: str, items: list[int]) -> list[int]:
        flat = mesh.flatten("rank")
        calls = [
            getattr(flat.slice(rank=i), method_name).call_one([x]) for i, x in enumerate(items)
        ]
        return [r for part in await asyncio.gather(*calls) for r in part]

    assert grid.rank_of.shard_with(gather_ranks)([7, 7, 7, 7]).get(timeout=30) == [0, 1, 2, 3]


def test_shard_is_awaitable_from_asyncio(grid: Any) -> None:
    async def main() -> list[Any]:
        return await grid.take.shard([1, 2])  # type: ignore[no-any-return]

    assert [item[2] for item in asyncio.run(main())] == [1, 2]
