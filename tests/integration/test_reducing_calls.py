"""``endpoint.reduce(combine)(...)``: every actor's value combined into one, by the host
agents for their own hosts' actors first (one value per host reaches the caller)."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from actormesh import Actor, ActorError, HostMesh, ProcMesh, current_rank, endpoint, host_mesh
from actormesh import proc_mesh as make_proc_mesh
from actormesh._core import headers

pytestmark = pytest.mark.timeout(120)


class Numbers(Actor):
    @endpoint
    def value(self, scale: int) -> int:
        return (current_rank().rank + 1) * scale

    @endpoint
    def tensor(self) -> torch.Tensor:
        return torch.full((3,), float(current_rank().rank))

    @endpoint
    def word(self) -> str:
        return f"w{current_rank().rank}"

    @endpoint
    def fails_on_two(self) -> int:
        if current_rank().rank == 2:
            raise ValueError("rank 2 refuses")
        return 1

    @endpoint
    def agent_of(self) -> int:
        return os.getppid()


@pytest.fixture(scope="module")
def hosts() -> Iterator[HostMesh]:
    mesh = host_mesh(2).get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.shutdown().get(timeout=30)


@pytest.fixture(scope="module")
def on_hosts(hosts: HostMesh) -> Iterator[Any]:
    procs = hosts.spawn_procs(per_host={"gpus": 3})
    yield procs.spawn("numbers", Numbers)
    procs.stop().get(timeout=30)


@pytest.fixture(scope="module")
def local() -> Iterator[Any]:
    procs: ProcMesh = make_proc_mesh(gpus=3).get(timeout=60)
    yield procs.spawn("numbers_here", Numbers)
    procs.stop().get(timeout=30)


def test_reduce_equals_the_fold_of_calls_values(local: Any, on_hosts: Any) -> None:
    for mesh in (local, on_hosts):
        values = list(mesh.value.call(10).get(timeout=30).values())
        assert mesh.value.reduce(operator.add)(10).get(timeout=30) == sum(values)
        assert mesh.value.reduce(max)(scale=2).get(timeout=30) == max(values) // 5


def test_each_host_agent_sends_one_partial_for_its_actors(on_hosts: Any, folded: list[int]) -> None:
    assert len(set(on_hosts.agent_of.call().get(timeout=30).values())) == 2
    seen = folded
    assert on_hosts.value.reduce(operator.add)(1).get(timeout=30) == 21  # 1 + ... + 6
    assert seen == [headers.PARTIAL, headers.PARTIAL]


def test_processes_without_an_agent_answer_one_by_one(local: Any, folded: list[int]) -> None:
    seen = folded
    assert local.value.reduce(operator.add)(1).get(timeout=30) == 6
    assert sorted(seen) == [0, 1, 2]


def test_tensors_reduce_as_torch_sums_them(on_hosts: Any) -> None:
    values = list(on_hosts.tensor.call().get(timeout=30).values())
    total = on_hosts.tensor.reduce(torch.add)().get(timeout=30)
    torch.testing.assert_close(total, torch.stack(values).sum(0), rtol=0, atol=0)


def test_a_slice_reduces_only_its_actors(on_hosts: Any) -> None:
    first_host = on_hosts.slice(hosts=0)
    assert first_host.value.reduce(operator.add)(1).get(timeout=30) == 1 + 2 + 3


def test_an_actor_error_fails_the_reduce_with_that_error(on_hosts: Any, local: Any) -> None:
    for mesh in (on_hosts, local):
        with pytest.raises(ActorError, match="rank 2 refuses") as caught:
            mesh.fails_on_two.reduce(operator.add)().get(timeout=30)
        assert isinstance(caught.value.cause, ValueError)


def test_a_combine_that_fails_in_the_agent_fails_the_call_where_the_caller_sees_it(
    on_hosts: Any,
) -> None:
    # operator.sub on strings raises in the agent, which sends the values up unfolded;
    # the caller's own fold raises the same error.
    with pytest.raises(TypeError, match="unsupported operand"):
        on_hosts.word.reduce(operator.sub)().get(timeout=30)
    words = on_hosts.word.reduce(operator.add)().get(timeout=30)  # in arrival order
    assert sorted(words.split("w")[1:]) == ["0", "1", "2", "3", "4", "5"]


def test_reduce_refuses_what_is_not_a_function_at_the_call(local: Any) -> None:
    with pytest.raises(TypeError, match="reduce\\(\\) needs a function"):
        local.value.reduce(3)
