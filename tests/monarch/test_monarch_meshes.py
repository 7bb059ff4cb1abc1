"""Host, process and actor meshes: ``this_host``, ``this_proc``, ``HostMesh.spawn_procs``,
``ProcMesh.spawn`` and the shape of what they return, as in Monarch 0.7."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from actormesh import MeshStoppedError
from actormesh.actor import (
    Actor,
    Future,
    HostMesh,
    MeshFailure,
    ProcMesh,
    ValueMesh,
    endpoint,
    this_host,
    this_proc,
)
from actormesh.testing import run, wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import (
        BOOT_VARIABLE,
        Echo,
        FailsInInit,
        ProcMeshHolder,
        mark_booted,
    )
else:
    from monarch_actors import BOOT_VARIABLE, Echo, FailsInInit, ProcMeshHolder, mark_booted

WHOLE = {"nodes": 2, "gpus": 2}


def test_this_host_is_a_host_mesh_without_dimensions() -> None:
    host = this_host()
    assert isinstance(host, HostMesh)
    assert dict(host.extent) == {}
    assert host.sizes == {}
    assert host.size() == 1
    assert len(host) == 1
    assert host.initialized.get(timeout=30) is True


def test_this_proc_is_a_proc_mesh_without_dimensions() -> None:
    proc = this_proc()
    assert isinstance(proc, ProcMesh)
    assert dict(proc.extent) == {}
    assert proc.sizes == {}
    assert proc.size() == 1


def test_spawn_procs_gives_a_proc_mesh_with_the_per_host_dimensions(procs: ProcMesh) -> None:
    assert isinstance(procs, ProcMesh)
    assert dict(procs.extent) == WHOLE
    assert procs.extent.labels == ["nodes", "gpus"]
    assert procs.sizes == WHOLE
    assert procs.size() == 4
    assert procs.size("gpus") == 2
    assert procs.size(["nodes", "gpus"]) == 4
    assert len(procs) == 4
    assert dict(procs.slice(nodes=1).extent) == {"gpus": 2}
    assert dict(procs.slice(gpus=slice(0, 1)).extent) == {"nodes": 2, "gpus": 1}


def test_a_proc_mesh_is_initialized(procs: ProcMesh) -> None:
    mesh: Any = procs
    assert mesh.initialized.get(timeout=30) is True


def test_the_host_mesh_of_a_single_process(procs: ProcMesh) -> None:
    whole: Any = procs
    one: Any = procs.slice(nodes=0, gpus=1)
    assert isinstance(one.host_mesh, HostMesh)
    assert dict(one.host_mesh.extent) == {}
    with pytest.raises(NotImplementedError):
        _ = whole.host_mesh


@pytest.mark.timeout(60)
def test_bootstrap_runs_in_every_new_process_before_its_actors() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=mark_booted, name="booted")
    try:
        echo = procs.spawn("boot_check", Echo)
        pids = echo.pid.call().get(timeout=30).values()
        marks = echo.env.call(BOOT_VARIABLE).get(timeout=30).values()
        assert marks == [f"booted-{pid}" for pid in pids]
        assert len(set(pids)) == 2
    finally:
        procs.stop().get(timeout=30)


def test_spawn_returns_the_actor_mesh_at_once(procs: ProcMesh) -> None:
    mesh = procs.spawn("spawned", Echo)
    assert not isinstance(mesh, Future)
    assert dict(mesh.extent) == WHOLE
    assert mesh.sizes == WHOLE
    assert mesh.size() == 4
    actors: Any = mesh  # actormesh types spawn() as the actor class, which has no len()
    assert len(actors) == 4
    assert mesh.initialized.get(timeout=30) is None
    assert mesh.ping.call().get(timeout=30).values() == ["pong"] * 4


def test_the_initialized_future_of_an_actor_mesh_can_be_awaited(procs: ProcMesh) -> None:
    async def main() -> list[str]:
        mesh = procs.spawn("awaited", Echo)
        initialized: Future[Any] = mesh.initialized
        assert await initialized is None
        result: ValueMesh[str] = await mesh.ping.call()
        return result.values()

    assert run(main()) == ["pong"] * 4


def test_spawn_passes_the_remaining_arguments_to_init(procs: ProcMesh) -> None:
    positional = procs.spawn("positional", Echo, "first")
    keyword = procs.spawn("keyword", Echo, tag="second")
    assert positional.get_tag.call().get(timeout=30).values() == ["first"] * 4
    assert keyword.get_tag.call().get(timeout=30).values() == ["second"] * 4


def test_the_same_name_may_be_spawned_twice(procs: ProcMesh) -> None:
    first = procs.spawn("twice", Echo, "a")
    second = procs.spawn("twice", Echo, "b")
    assert first.get_tag.call().get(timeout=30).values() == ["a"] * 4
    assert second.get_tag.call().get(timeout=30).values() == ["b"] * 4


def test_spawn_needs_a_subclass_of_actor(procs: ProcMesh) -> None:
    with pytest.raises(ValueError, match="Actor"):
        procs.spawn("not_an_actor", object)


def test_an_endpoint_named_like_a_mesh_attribute_is_refused_at_spawn(procs: ProcMesh) -> None:
    with pytest.raises(ValueError, match="collides"):

        class Stoppable(Actor):
            @endpoint
            async def stop(self) -> None:  # type: ignore[override]
                pass

        procs.spawn("stoppable", Stoppable)


def test_actor_meshes_slice_split_flatten_and_rename(echo: Echo) -> None:
    assert dict(echo.slice(gpus=1).extent) == {"nodes": 2}
    assert dict(echo.slice(nodes=1, gpus=0).extent) == {}
    assert dict(echo.slice(gpus=slice(0, 1)).extent) == {"nodes": 2, "gpus": 1}
    assert dict(echo.flatten("r").extent) == {"r": 4}
    assert dict(echo.rename(gpus="g").extent) == {"nodes": 2, "g": 2}
    assert dict(echo.split(nodes=("a", "b"), b=1).extent) == {"a": 2, "b": 1, "gpus": 2}
    # The views reach the same actors, in the same order.
    assert echo.flatten("r").rank.call().get(timeout=30).values() == [0, 1, 2, 3]
    assert echo.slice(gpus=1).rank.call().get(timeout=30).values() == [1, 3]
    assert echo.slice(nodes=1, gpus=0).rank.call_one().get(timeout=30) == 2


def test_call_one_needs_exactly_one_actor(echo: Echo) -> None:
    with pytest.raises(ValueError, match=r"exactly (1|one)"):
        echo.ping.call_one()  # raised at the call, not by the future
    # A kept dimension of size one is one actor.
    assert echo.slice(nodes=0, gpus=slice(1, 2)).rank.call_one().get(timeout=30) == 1


def test_arguments_are_checked_against_the_signature_at_the_call(echo: Echo) -> None:
    with pytest.raises(TypeError):
        echo.inc.call(1, 2, 3)  # type: ignore[call-arg]


def test_calling_a_method_that_is_not_an_endpoint_raises_runtime_error(echo: Echo) -> None:
    with pytest.raises(RuntimeError, match="not annotated as an endpoint"):
        _ = echo.not_an_endpoint(1)


def test_a_point_unpacks_into_slice_to_reach_the_peer(procs: ProcMesh, echo: Echo) -> None:
    others = procs.spawn("others", Echo)
    answers = echo.peer_identity.call(others).get(timeout=30)
    for point, identity in answers.items():
        assert identity["rank"] == dict(point)
        assert identity["name"] == "others"


def test_an_actor_mesh_passes_to_a_constructor(procs: ProcMesh) -> None:
    tagged = procs.spawn("tagged", Echo, "from-peer")
    holder = procs.spawn("holder", Echo, "holder", tagged)
    assert holder.ask_constructor_peer.call().get(timeout=30).values() == ["from-peer"] * 4


def test_this_proc_on_the_controller_runs_actors_in_this_process() -> None:
    local = this_proc().spawn("controller_local", Echo, "local")
    try:
        assert dict(local.extent) == {}
        assert local.pid.call_one().get(timeout=30) == os.getpid()
        assert local.identity.call_one().get(timeout=30)["rank"] == {}
    finally:
        local.stop().get(timeout=30)


def test_inside_an_actor_this_host_and_this_proc_have_no_dimensions(echo: Echo) -> None:
    wheres = echo.where.call().get(timeout=30).values()
    assert wheres == [{"host": {}, "proc": {}}] * 4


def test_inside_an_actor_this_proc_spawns_in_the_actors_process(echo: Echo) -> None:
    here, spawned = echo.slice(nodes=1, gpus=1).spawn_here.call_one().get(timeout=30)
    assert spawned == here
    assert here != os.getpid()


def test_calls_to_a_stopped_actor_mesh_fail(procs: ProcMesh, fault_hook: list[MeshFailure]) -> None:
    # Monarch also reports the undeliverable call to the client's fault hook (whose
    # default ends the program): a program that calls stopped meshes sets its own.
    mesh = procs.spawn("stopped", Echo)
    assert mesh.ping.call().get(timeout=30).values() == ["pong"] * 4
    mesh.stop().get(timeout=30)
    # actormesh's MeshStoppedError (Monarch raises its SupervisionError, not exported).
    with pytest.raises(MeshStoppedError, match=r"^actor mesh 'stopped' was stopped"):
        mesh.ping.call().get(timeout=30)


def test_an_async_proc_mesh_stop_can_be_awaited() -> None:
    async def main() -> None:
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        echo = procs.spawn("stop_awaited", Echo)
        assert await echo.ping.call_one() == "pong"
        stopping: Future[Any] = procs.stop()
        assert await stopping is None

    run(main())


@pytest.mark.timeout(60)
def test_a_proc_mesh_passed_to_an_actor_spawns_there_and_is_stopped_by_its_owner() -> None:
    holder_procs = this_host().spawn_procs(per_host={"gpus": 1})
    lent = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        holder = holder_procs.spawn("holder", ProcMeshHolder).slice(gpus=0)
        expected = sorted(lent.spawn("pids", Echo).pid.call().get(timeout=30).values())
        assert holder.pids_of_spawned.call_one(lent).get(timeout=30) == expected
        refused = holder.try_stopping.call_one(lent).get(timeout=30)
        assert "only that process stops it" in refused
    finally:
        lent.stop().get(timeout=30)
        holder_procs.stop().get(timeout=30)


def test_an_actor_spawns_beside_itself_on_its_proc_mesh(procs: ProcMesh) -> None:
    holder = procs.spawn("beside", ProcMeshHolder)
    own = sorted(procs.spawn("own_pids", Echo).pid.call().get(timeout=30).values())
    assert holder.slice(nodes=0, gpus=0).pids_on_own_proc_mesh.call_one().get(timeout=30) == own


def test_the_controllers_proc_mesh_is_this_proc() -> None:
    from actormesh.actor import context

    mesh = context().actor_instance.proc_mesh
    assert isinstance(mesh, ProcMesh)
    assert mesh.spawn("in_controller", Echo).pid.call_one().get(timeout=30) == os.getpid()


def test_an_init_failing_on_every_rank_is_one_failure_per_rank(
    procs: ProcMesh, fault_hook: list[MeshFailure]
) -> None:
    procs.spawn("fails_in_init", FailsInInit)
    wait_until(lambda: len(fault_hook) >= 4, 30, "a failure of each rank")
    assert sorted(f.ranks for f in fault_hook) == [(0,), (1,), (2,), (3,)]
    for failure in fault_hook:
        assert "fails_in_init" in str(failure)
        assert f"no good on rank {failure.ranks[0]}" in str(failure)
