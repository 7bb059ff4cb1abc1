"""Issue 6, points 4 and 5: torch.distributed inside a mesh, weight sync between meshes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from groups_actors import TorchWorker

from actormesh import ActorDiedError, actor_mesh, proc_mesh
from actormesh.torch import (
    destroy_process_group,
    setup_process_group,
    sync_weights,
    weights_versions,
)
from actormesh.torch._weights import partition


@pytest.fixture(scope="module")
def trainers() -> Iterator[Any]:
    """Two trainers in one gloo process group."""
    mesh = actor_mesh(TorchWorker, (64, 0), shape={"dp": 2}, name="trainers").get(timeout=60)
    try:
        setup_process_group(mesh).get(timeout=60)
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


@pytest.fixture(scope="module")
def generators() -> Iterator[Any]:
    """Three generators whose weights differ from the trainers' (another seed)."""
    mesh = actor_mesh(TorchWorker, (64, 1), shape=3, name="generators").get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def test_process_group_sets_torch_variables_on_every_actor(trainers: Any) -> None:
    envs = list(trainers.environment.call().get(timeout=30).values())
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    assert int(envs[0]["MASTER_PORT"]) > 0


def test_collectives_run_across_the_actors(trainers: Any) -> None:
    # rank 0 contributes 1.5, rank 1 contributes 2.5: both see the sum.
    values = [
        trainers.slice(dp=0).all_reduce.call_one(1.5),
        trainers.slice(dp=1).all_reduce.call_one(2.5),
    ]
    assert [v.get(timeout=30) for v in values] == [4.0, 4.0]


def test_ddp_keeps_replicas_identical_while_each_rank_trains_on_its_own_batch(
    trainers: Any,
) -> None:
    weights = list(trainers.train_step.call(seed=7).get(timeout=60).values())
    assert weights[0] == weights[1]


def test_the_group_is_torn_down_with_the_mesh_and_can_be_set_up_again() -> None:
    procs = proc_mesh(dp=2).get(timeout=60)
    try:
        first = procs.spawn("first", TorchWorker)
        setup_process_group(first).get(timeout=60)
        assert list(first.group_ready.call().get(timeout=30).values()) == [True, True]
        # A mesh has one group: a second setup says so...
        with pytest.raises(RuntimeError, match=r"mesh 'first' already has its .* process group"):
            setup_process_group(first).get(timeout=60)
        # ...and the same processes cannot hold a second default group...
        second = procs.spawn("second", TorchWorker)
        with pytest.raises(RuntimeError, match=r"already have a torch\.distributed process group"):
            setup_process_group(second).get(timeout=60)
        # ...until the first mesh stops, which destroys its group in every process.
        first.stop().get(timeout=30)
        assert list(second.group_ready.call().get(timeout=30).values()) == [False, False]
        setup_process_group(second).get(timeout=60)
        assert second.all_reduce.call(1.0).get(timeout=30).item(dp=1) == 2.0
        destroy_process_group(second).get(timeout=30)
        assert list(second.group_ready.call().get(timeout=30).values()) == [False, False]
    finally:
        procs.stop().get(timeout=30)


def test_weight_sync_gives_every_generator_the_trainers_weights_and_version(
    trainers: Any, generators: Any
) -> None:
    trainers.train_step.call(seed=1).get(timeout=60)
    expected = trainers.slice(dp=0).output.call_one().get(timeout=30)
    assert set(generators.output.call().get(timeout=30).values()) != {expected}
    report = sync_weights(trainers, generators, version=5).get(timeout=60)
    assert list(generators.output.call().get(timeout=30).values()) == [expected] * 3
    assert list(weights_versions(generators).get(timeout=30).values()) == [5, 5, 5]
    assert list(generators.version.call().get(timeout=30).values()) == [5, 5, 5]
    size = (64 * 64 + 64 + 64 + 1) * 4  # two Linear layers of float32
    assert report.version == 5
    assert report.bytes == size
    assert report.delivered == 3 * size
    assert report.seconds > 0 and report.mb_per_s > 0

    # The next step changes the generators' outputs again, and the version with them.
    trainers.train_step.call(seed=2).get(timeout=60)
    sync_weights(trainers, generators, version=6).get(timeout=60)
    after = trainers.slice(dp=0).output.call_one().get(timeout=30)
    assert after != expected
    assert list(generators.output.call().get(timeout=30).values()) == [after] * 3
    assert list(weights_versions(generators).get(timeout=30).values()) == [6, 6, 6]


def test_a_sync_to_a_dead_generator_says_which_and_what_to_do(trainers: Any) -> None:
    generators = actor_mesh(TorchWorker, (64, 1), shape=2, name="mortal").get(timeout=60)
    try:
        os.kill(generators.slice(dim0=1).pid.call_one().get(timeout=30), signal.SIGKILL)
        with pytest.raises(ActorDiedError) as caught:
            sync_weights(trainers, generators, version=9).get(timeout=60)
        message = str(caught.value)
        assert "{dim0=1} of mesh 'mortal'" in message
        assert "a library function (run_in_actors) of mesh 'trainers'" in message
        assert "__actormesh_system__" not in message
        assert any("sync a slice of the live ones" in n for n in caught.value.__notes__)
        live = generators.slice(dim0=0)
        assert sync_weights(trainers, live, version=10).get(timeout=60).version == 10
    finally:
        generators.stop().get(timeout=30)


def test_select_sends_each_generator_only_what_it_needs(trainers: Any, generators: Any) -> None:
    def wanted(name: str, point: Any) -> bool:
        return name.startswith("0.") if point.rank == 0 else True

    report = sync_weights(trainers, generators, version=9, select=wanted).get(timeout=60)
    first_layer = (64 * 64 + 64) * 4
    assert report.delivered == first_layer + 2 * report.bytes
    assert list(weights_versions(generators).get(timeout=30).values()) == [9, 9, 9]


def test_functions_can_get_and_set_the_state(trainers: Any, generators: Any) -> None:
    def get_state(actor: Any) -> dict[str, torch.Tensor]:
        return {"bias": torch.full((1,), 42.0)}

    def set_state(actor: Any, state: dict[str, torch.Tensor], version: int) -> None:
        with torch.no_grad():
            actor.model[1].bias.copy_(state["bias"])

    sync_weights(
        trainers, generators, version=11, get_state=get_state, set_state=set_state, layout="sharded"
    ).get(timeout=60)
    sums = generators.weight_sum.call("1.bias").get(timeout=30)
    assert list(sums.values()) == [42.0, 42.0, 42.0]


def test_partition_balances_bytes_and_is_the_same_everywhere() -> None:
    sizes = {"a": 100, "b": 60, "c": 50, "d": 40, "e": 10}
    parts = partition(sizes, 2)
    assert parts == partition(dict(reversed(list(sizes.items()))), 2)
    assert sorted(n for p in parts for n in p) == sorted(sizes)
    loads = [sum(sizes[n] for n in p) for p in parts]
    assert abs(loads[0] - loads[1]) <= max(sizes.values())


def test_bad_layout_fails_at_the_call(trainers: Any, generators: Any) -> None:
    with pytest.raises(ValueError, match="layout"):
        sync_weights(trainers, generators, version=1, layout="mirrored")  # type: ignore[arg-type]


def test_a_slice_of_a_mesh_forms_a_group_and_syncs_its_weights(generators: Any) -> None:
    # The layouts are keyed by each actor's place in its whole mesh, not by its place in
    # the slice a system call is sent to (current_rank()).
    mesh = actor_mesh(TorchWorker, (64, 0), shape={"dp": 3}, name="sliced").get(timeout=60)
    try:
        tail = mesh.slice(dp=slice(1, 3))
        setup_process_group(tail).get(timeout=60)
        assert tail.all_reduce.call(1.0).get(timeout=60).values() == [2.0, 2.0]
        tail.train_step.call(seed=3).get(timeout=60)
        expected = tail.slice(dp=1).output.call_one().get(timeout=30)
        (label,) = generators.extent.labels
        first_two = generators.slice(**{label: slice(0, 2)})
        sync_weights(tail, first_two, version=9).get(timeout=60)
        outputs = generators.output.call().get(timeout=30).values()
        assert outputs[:2] == [expected, expected]
    finally:
        mesh.stop().get(timeout=30)
