"""Issue 6, point 1: the Ray ActorMesh construction and vocabulary, with real processes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from groups_actors import Probe

import actormesh
from actormesh import Actor, ActorMesh, MeshStoppedError, actor_mesh, endpoint
from actormesh._api._actor import RESERVED_NAMES


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def test_dict_shape_makes_the_product_of_its_sizes_with_named_coordinates() -> None:
    async def main() -> list[dict[str, object]]:
        async with await actor_mesh(Probe, ("t",), shape={"dp": 2, "tp": 3}) as mesh:
            assert mesh.shape.extent == {"dp": 2, "tp": 3}
            return list((await mesh.describe.all()).values())

    found = asyncio.run(main())
    assert len(found) == 6  # 2 × 3, not the proposal's 2 + 3
    assert [d["coords"] for d in found] == [
        {"dp": dp, "tp": tp} for dp in range(2) for tp in range(3)
    ]
    assert [d["actormesh_rank"] for d in found] == [str(r) for r in range(6)]
    assert len({d["pid"] for d in found}) == 6  # one process per actor


def test_ray_style_constructor_returns_a_ready_mesh_that_owns_its_processes() -> None:
    mesh = ActorMesh(Probe, ("ray",), {"extra": 7}, shape=(2, 2))
    try:
        assert isinstance(mesh, ActorMesh)
        assert mesh.size() == 4
        assert mesh.shape.labels == ("dim0", "dim1")
        values = list(mesh.describe.all().get(timeout=30).values())
        assert {(v["tag"], v["extra"]) for v in values} == {("ray", 7)}
        pids = [v["pid"] for v in values]
    finally:
        mesh.stop().get(timeout=30)
    assert not [pid for pid in pids if pid_alive(pid)]
    with pytest.raises(MeshStoppedError):
        mesh.describe.all()
    with pytest.raises(MeshStoppedError):
        mesh.describe.choose()


def test_constructor_arguments_named_like_spawn_parameters_reach_the_actor() -> None:
    with ActorMesh(Probe, ("t",), {"name": "n", "extra": 2}, shape=1, name="probe") as mesh:
        found = mesh.describe.call_one().get(timeout=30)
    assert (found["tag"], found["name"], found["extra"]) == ("t", "n", 2)


def test_int_shape_and_all_is_call() -> None:
    with ActorMesh(Probe, shape=3) as mesh:
        assert mesh.shape.extent == {"dim0": 3}
        assert mesh.describe.all().get(timeout=30).shape == mesh.describe.call().get().shape


def test_env_is_given_to_every_actor_or_computed_per_actor() -> None:
    async def main() -> list[dict[str, str]]:
        async with await actor_mesh(
            Probe,
            shape={"dp": 2, "tp": 2},
            env=lambda point: {"GROUP_SHARD": f"{point['dp']}-{point['tp']}"},
            runtime_env={"env_vars": {"GROUP_JOB": "j1", "GROUP_SHARD": "overridden"}},
        ) as mesh:
            return [d["env"] for d in (await mesh.describe.all()).values()]

    envs = asyncio.run(main())
    assert [e["GROUP_SHARD"] for e in envs] == ["0-0", "0-1", "1-0", "1-1"]
    assert {e["GROUP_JOB"] for e in envs} == {"j1"}


def test_cpus_per_actor_pins_each_process_to_its_own_cpus() -> None:
    available = sorted(os.sched_getaffinity(0))
    count = min(len(available), 2)
    with ActorMesh(Probe, shape=count, cpus_per_actor=1) as mesh:
        found = list(mesh.describe.all().get(timeout=30).values())
    assert [d["cpus"] for d in found] == [[cpu] for cpu in available[:count]]
    assert {d["env"]["OMP_NUM_THREADS"] for d in found} == {"1"}


def test_gpus_are_shared_out_through_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The ids this process may use are the ones it may hand out (no GPU needed for that).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7,9")
    with ActorMesh(Probe, shape=2, resources_per_actor={"GPU": 2}) as mesh:
        found = list(mesh.describe.all().get(timeout=30).values())
    assert [d["cuda"] for d in found] == ["3,5", "7,9"]


def test_asking_for_more_cpus_or_gpus_than_exist_fails_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match="need 2 GPUs, but 1 are visible"):
        actor_mesh(Probe, shape=2, gpus_per_actor=1)
    too_many = len(os.sched_getaffinity(0)) + 1
    with pytest.raises(ValueError, match="CPUs, but this process may use"):
        actor_mesh(Probe, shape=too_many, cpus_per_actor=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"args": 5}, TypeError, "args must be a tuple or list"),
        ({"kwargs": [1]}, TypeError, "kwargs must be a mapping"),
        ({"resources_per_actor": {"TPU": 1}}, ValueError, "unknown resource 'TPU'"),
        ({"resources_per_actor": {"CPU": 0.5}}, ValueError, "whole number"),
        ({"runtime_env": {"pip": ["x"]}}, ValueError, "only 'env_vars'"),
        ({"choose": "fastest"}, ValueError, "unknown choose policy"),
        ({"max_in_flight": 0}, ValueError, "max_in_flight must be"),
        ({"shape": {"dp": 0}}, ValueError, "must be >= 1"),
    ],
)
def test_bad_construction_arguments_fail_at_the_call(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    options: dict[str, object] = {"shape": 2, **kwargs}
    with pytest.raises(error, match=message):
        actor_mesh(Probe, **options)  # type: ignore[arg-type]


def test_only_actor_classes_can_be_meshed() -> None:
    with pytest.raises(TypeError, match=r"subclass of actormesh\.Actor"):
        actor_mesh(dict, shape=2)


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_an_endpoint_named_like_a_mesh_attribute_is_rejected_at_class_definition(
    name: str,
) -> None:
    def method(self: object) -> None: ...

    method.__name__ = name
    with pytest.raises(TypeError, match=f"\\['{name}'\\]: each name collides"):
        type("Clashing", (Actor,), {name: endpoint(method)})


def test_an_endpoint_starting_with_an_underscore_is_rejected() -> None:
    with pytest.raises(TypeError, match="starting with '_'"):

        class Hidden(Actor):
            @endpoint
            def _state(self) -> None: ...


def test_reserved_names_cover_every_public_attribute_of_a_mesh() -> None:
    public = {name for name in dir(ActorMesh) if not name.startswith("_")}
    assert public <= RESERVED_NAMES, sorted(public - RESERVED_NAMES)


def test_the_names_users_need_are_exported() -> None:
    for name in ("actor_mesh", "ActorMesh", "MeshBusyError", "ChoosePolicy", "split_along"):
        assert name in actormesh.__all__


def test_an_unknown_choose_policy_fails_where_it_is_named() -> None:
    # At the class definition and at with_policy, not at the first choose.
    with pytest.raises(ValueError, match="unknown choose policy 'bogus'"):

        class Bogus(Actor):
            @endpoint(choose="bogus")
            def f(self) -> None:
                pass

    mesh = actor_mesh(Probe, shape=1).get(timeout=60)
    try:
        with pytest.raises(ValueError, match="unknown choose policy 'bogus'"):
            mesh.with_policy("bogus")
    finally:
        mesh.stop().get(timeout=30)
