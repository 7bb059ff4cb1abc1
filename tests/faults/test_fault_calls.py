"""Calls never hang: deaths fail what waits on them, and the living keep serving."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from faults_actors import Worker

import actormesh
from actormesh import ActorDiedError, ActorMesh, ProcMesh, proc_mesh
from actormesh.testing import wait_until


@pytest.fixture
def procs() -> Iterator[ProcMesh]:
    mesh = proc_mesh(gpus=4).get(timeout=30)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def kill(mesh: ActorMesh[Worker], *ranks: int) -> None:
    pids = mesh.pid.call().get(timeout=10)
    for rank in ranks:
        os.kill(list(pids.values())[rank], signal.SIGKILL)


def test_a_call_over_many_ranks_fails_as_soon_as_one_dies(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    # The survivors sleep far longer than the wait: the call must fail with the death
    # (it resolves when a member died: docs/architecture.md, "Call paths"), not time out
    # waiting for them.
    mesh = procs.spawn("many", Worker)
    pids = list(mesh.pid.call().get(timeout=10).values())
    answered = mesh.echo.call("x")  # an earlier call, answered by everyone
    assert answered.get(timeout=10).values() == ["x"] * 4
    pending = mesh.sleep.call(30)
    os.kill(pids[1], signal.SIGKILL)
    os.kill(pids[3], signal.SIGKILL)
    with pytest.raises(ActorDiedError) as caught:
        pending.get(timeout=10)
    assert caught.value.ranks in ((1,), (3,), (1, 3))  # the death(s) seen first
    assert caught.value.values == {}  # the survivors are still sleeping
    assert "of mesh 'many' died" in str(caught.value)
    wait_until(lambda: len(failures) == 2, 5, "both deaths to be reported")
    assert sorted(r for f in failures for r in f.ranks) == [1, 3]


def test_a_call_to_an_already_dead_rank_fails_at_once(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    mesh = procs.spawn("dead", Worker)
    kill(mesh, 2)
    wait_until(lambda: len(failures) == 1, 5, "the death to be noticed")
    started = time.monotonic()
    with pytest.raises(ActorDiedError) as one:
        mesh.slice(gpus=2).echo.call_one(1).get(timeout=5)
    with pytest.raises(ActorDiedError) as many:
        mesh.echo.call("x").get(timeout=5)
    assert time.monotonic() - started < 3.0  # from what is known here, not the 5 s timeouts
    assert "killed by SIGKILL" in str(one.value)
    assert many.value.ranks == (2,)
    assert set(many.value.values) <= {0, 1, 3}  # whatever answered before it failed
    with pytest.raises(ActorDiedError) as broadcast:
        mesh.echo.broadcast("y")
    assert broadcast.value.ranks == (2,)


def test_slices_that_exclude_dead_ranks_keep_working(
    procs: ProcMesh, failures: list[actormesh.Failure]
) -> None:
    mesh = procs.spawn("slices", Worker)
    kill(mesh, 0)
    wait_until(lambda: len(failures) == 1, 5, "the death to be noticed")
    live = mesh.slice(gpus=slice(1, 4))
    for _ in range(3):
        assert list(live.echo.call(7).get(timeout=10).values()) == [7, 7, 7]
    assert mesh.slice(gpus=3).add.call_one(1, b=2).get(timeout=10) == 3
    chosen = {mesh.pid.choose().get(timeout=10) for _ in range(10)}
    assert len(chosen) >= 1  # choose never picks the dead rank: no error raised


def test_a_stream_ends_when_a_rank_dies(procs: ProcMesh, failures: list[actormesh.Failure]) -> None:
    mesh = procs.spawn("stream", Worker)
    pids = list(mesh.pid.call().get(timeout=10).values())
    stream = mesh.sleep.stream(0.3)
    os.kill(pids[1], signal.SIGKILL)
    values, errors = [], []
    for future in stream:
        try:
            values.append(future.get(timeout=30))
        except ActorDiedError as error:
            errors.append(error.ranks)
    assert values == [0.3, 0.3, 0.3]
    assert errors == [(1,)]


def test_an_endpoint_error_leaves_the_actor_serving(procs: ProcMesh) -> None:
    mesh = procs.spawn("errors", Worker)
    with pytest.raises(ValueError, match="boom") as caught:
        mesh.slice(gpus=1).fail.call_one("boom").get(timeout=10)
    assert isinstance(caught.value, actormesh.ActorError)
    assert "raise ValueError(message)" in caught.value.remote_traceback
    assert caught.value.point == {"gpus": 1}
    assert mesh.slice(gpus=1).echo.call_one(1).get(timeout=10) == 1
