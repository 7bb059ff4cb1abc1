"""``actormesh.ray``: the Ray "ActorMesh API" proposal's spelling on a real Ray cluster.

Every result is a real ``ObjectRef``: ``ray.get`` it, ``ray.wait`` on it, pass it to
tasks. The review's asks (``mesh.f.all()``, ``mesh[1, 0]``, ``mesh[1, :]``, load-aware
``choose``, resources) are checked too.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from ray_actors import Counting, Entering, Generator, Grouped, Member, Pusher, Trainer

from actormesh.ray import ActorMesh, method
from actormesh.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def mesh(ray_cluster: Any) -> Any:
    made = ActorMesh(Member, (), {}, shape=(3,), resources_per_actor={"CPU": 0.25})
    yield made
    made.kill()


@pytest.fixture(scope="module")
def grid(ray_cluster: Any) -> Any:
    made = ActorMesh(Member, (), {"offset": 100}, shape=(2, 3), resources_per_actor={"CPU": 0.1})
    yield made
    made.kill()


def test_all_returns_one_object_ref_per_actor_in_rank_order(ray_cluster: Any, mesh: Any) -> None:
    refs = mesh.methods.f.all(1)
    assert isinstance(refs, list) and len(refs) == 3
    assert all(isinstance(ref, ray_cluster.ObjectRef) for ref in refs)
    assert ray_cluster.get(refs) == [1, 1, 1]
    assert ray_cluster.get(mesh.methods.whoami.all()) == [0, 1, 2]


def test_choose_returns_one_object_ref(ray_cluster: Any, mesh: Any) -> None:
    ref = mesh.methods.f.choose(1)
    assert isinstance(ref, ray_cluster.ObjectRef)
    assert ray_cluster.get(ref) == 1


def test_shard_returns_what_the_dispatch_fn_returns(mesh: Any) -> None:
    assert mesh.methods.process.shard([1, 2, 3, 4, 5, 6], 5) == [6, 7, 8, 9, 10, 11]
    batch = torch.eye(6)
    assert torch.equal(mesh.methods.torch_process.shard(batch, 1), torch.eye(6) + 1)


def test_shard_without_a_dispatch_fn_fails_as_the_proposal_does(mesh: Any) -> None:
    with pytest.raises(AssertionError, match=r"f.shard\(\) needs a dispatch_fn"):
        mesh.methods.f.shard([1, 2, 3])


def test_a_shape_of_several_dimensions_has_their_product_of_actors(
    ray_cluster: Any, grid: Any
) -> None:
    assert grid.num_actors == 6 and len(grid.actors) == 6
    assert grid.shape == (2, 3)
    assert ray_cluster.get(grid.methods.whoami.all()) == list(range(6))
    assert ray_cluster.get(grid.methods.f.all(1)) == [101] * 6  # kwargs reach __init__


def test_each_actor_sees_its_rank_the_mesh_size_and_the_users_env_vars(ray_cluster: Any) -> None:
    env = {"env_vars": {"MY_SETTING": "on", "RAY_ACTOR_MESH_RANK": "99"}}
    members = ActorMesh(
        Member, (), {}, shape={"dp": 2}, runtime_env=env, resources_per_actor={"CPU": 0.1}
    )
    try:
        assert ray_cluster.get(members.methods.env.all("RAY_ACTOR_MESH_RANK")) == ["0", "1"]
        assert ray_cluster.get(members.methods.env.all("RAY_ACTOR_MESH_SIZE")) == ["2", "2"]
        assert ray_cluster.get(members.methods.env.all("MY_SETTING")) == ["on", "on"]
        assert env == {"env_vars": {"MY_SETTING": "on", "RAY_ACTOR_MESH_RANK": "99"}}
    finally:
        members.kill()


def test_the_actor_handles_are_plain_ray(ray_cluster: Any, mesh: Any) -> None:
    assert ray_cluster.get(mesh.actors[2].whoami.remote()) == 2
    assert ray_cluster.get(mesh.methods.undecorated.all(2)) == [20, 20, 20]


def test_refs_go_to_ray_wait_and_to_ray_tasks(ray_cluster: Any, mesh: Any) -> None:
    refs = mesh.methods.f.all(4)
    ready, pending = ray_cluster.wait(refs, num_returns=3, timeout=60)
    assert len(ready) == 3 and pending == []

    @ray_cluster.remote(num_cpus=0.1)
    def total(*values: int) -> int:
        return sum(values)

    assert ray_cluster.get(total.remote(*refs)) == 12


def test_num_returns_gives_a_list_of_refs_per_actor(ray_cluster: Any, mesh: Any) -> None:
    pairs = mesh.methods.pair.all(7)
    assert [len(pair) for pair in pairs] == [2, 2, 2]
    assert [ray_cluster.get(pair) for pair in pairs] == [[7, 0], [7, 1], [7, 2]]


def test_the_reviews_asks_methods_without_dot_methods_and_indexing(
    ray_cluster: Any, grid: Any
) -> None:
    assert ray_cluster.get(grid.whoami.all()) == list(range(6))
    assert ray_cluster.get(grid[1, 0].whoami.remote()) == 3  # a plain actor handle
    row = grid[1, :]
    assert row.num_actors == 3 and row.shape == (3,)
    assert ray_cluster.get(row.whoami.all()) == [3, 4, 5]
    assert ray_cluster.get(row.whoami.choose()) in {3, 4, 5}
    assert ray_cluster.get(grid.slice(dim1=2).whoami.all()) == [2, 5]
    assert ray_cluster.get(grid[1, :1].whoami.remote()) == 3
    with pytest.raises(ValueError, match="needs a mesh of one actor"):
        row.whoami.remote()
    with pytest.raises(IndexError):
        grid[2, 0]
    with pytest.raises(AttributeError):
        grid.no_such_method  # noqa: B018


def test_choose_avoids_a_busy_actor(ray_cluster: Any, tmp_path: Path) -> None:
    members = ActorMesh(
        Member, (), {}, shape=(3,), resources_per_actor={"CPU": 0.1}, choose="least_loaded"
    )
    try:
        ray_cluster.get(members.methods.whoami.all())  # all three are up
        gate = tmp_path / "open"
        busy = members.methods.hold_until.choose(str(gate), 60.0)
        picked = [members.methods.hold_until.choose(str(gate), 60.0) for _ in range(4)]
        gate.touch()
        busy_rank = ray_cluster.get(busy, timeout=60)
        ranks = ray_cluster.get(picked, timeout=60)
        assert busy_rank not in ranks[:2]  # the two idle actors went first
        assert sorted(ranks[:2]) == sorted({0, 1, 2} - {busy_rank})
    finally:
        members.kill()


def test_fractional_and_custom_resources_are_reserved(ray_cluster: Any) -> None:
    # The cluster has 2 "slot": a third actor that needs one cannot be placed.
    members = ActorMesh(Member, (), {}, shape=(3,), resources_per_actor={"slot": 1, "CPU": 0.5})
    try:
        refs = members.methods.whoami.all()
        ready, pending = ray_cluster.wait(refs, num_returns=2, timeout=60)
        assert len(ready) == 2
        late, _ = ray_cluster.wait(pending, timeout=1.0)
        assert late == []  # still pending: Ray has no slot for it
    finally:
        members.kill()


def test_weight_sync_between_two_meshes_passes_object_refs(ray_cluster: Any) -> None:
    trainers = ActorMesh(Trainer, (), {}, shape=(1,), resources_per_actor={"CPU": 0.1})
    generators = ActorMesh(Generator, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1})
    try:
        ray_cluster.get(trainers.step.all())
        state = trainers.methods.state_dict.choose()  # an ObjectRef, never fetched here
        assert ray_cluster.get(generators.methods.load.all(state)) == [16.0, 16.0]
    finally:
        trainers.kill()
        generators.kill()


def test_a_ray_remote_class_is_taken_as_its_plain_class(ray_cluster: Any) -> None:
    remote_member = ray_cluster.remote(Member)
    members = ActorMesh(remote_member, (), {}, shape=1, resources_per_actor={"CPU": 0.1})
    try:
        assert ray_cluster.get(members.methods.f.all(3)) == [3]
    finally:
        members.kill()


def test_a_call_right_after_kill_fails(ray_cluster: Any) -> None:
    members = ActorMesh(Member, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1})
    ray_cluster.get(members.methods.whoami.all())
    members.kill()
    # ray.kill alone returns before this process has heard of the death, and a call sent
    # then can still reach the actor and be answered (5 of 20 tries on a loaded machine).
    with pytest.raises(ray_cluster.exceptions.RayActorError):
        ray_cluster.get(members.methods.whoami.all(), timeout=60)


def test_kill_ends_actors_whose_call_queue_is_full(ray_cluster: Any, tmp_path: Path) -> None:
    # With max_pending_calls reached, Ray refuses even the probe kill() sends after
    # ray.kill; kill() must still return, the held call failing as the actor dies.
    decorated = ray_cluster.remote(max_pending_calls=1)(Entering)
    mesh = ActorMesh(decorated, (), {}, shape=1, resources_per_actor={"CPU": 0.1})
    gate = tmp_path / "gate"
    held = mesh.methods.enter_and_hold.all(str(tmp_path), "a", str(gate))
    wait_until((tmp_path / "a").exists, 60, "the held call to start")
    with pytest.raises(ray_cluster.exceptions.PendingCallsLimitExceeded):
        mesh.methods.enter_and_hold.all(str(tmp_path), "b", str(gate))
    mesh.kill()
    with pytest.raises(ray_cluster.exceptions.RayActorError):
        ray_cluster.get(held, timeout=60)


def test_bad_shapes_fail_clearly_before_any_actor_starts(ray_cluster: Any) -> None:
    with pytest.raises(TypeError, match="shape"):
        ActorMesh(Member, (), {}, shape=True)
    # The proposal would make a mesh of no actors, whose choose() raises IndexError later.
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        ActorMesh(Member, (), {}, shape=0)
    with pytest.raises(TypeError, match="must be an int"):
        ActorMesh(Member, (), {}, shape=(2, "3"))
    with pytest.raises(TypeError, match=r"shape must be an int, a tuple of ints .* not 2\.5"):
        ActorMesh(Member, (), {}, shape=2.5)
    with pytest.raises(ValueError, match="takes none"):  # affinity needs a key
        ActorMesh(Member, (), {}, shape=(2,), choose="affinity")
    with pytest.raises(ValueError, match="least_loded"):  # checked before actors start
        ActorMesh(Member, (), {}, shape=(2,), choose="least_loded")


def test_method_takes_every_form_of_the_decorator() -> None:
    class Plain:
        @method
        def a(self) -> int:
            return 1

        @method()
        def b(self) -> int:
            return 2

        @method(num_returns=2)
        def c(self) -> tuple[int, int]:
            return 3, 4

    assert Plain().a() == 1 and Plain().b() == 2 and Plain().c() == (3, 4)
    assert Plain.a._dispatch_fn is None  # type: ignore[attr-defined]


def test_a_mesh_travels_to_ray_actors_and_they_call_it(ray_cluster: Any) -> None:
    # Actors hold references to other meshes and call them directly (docs/architecture.md,
    # "Actor to actor").
    generators = ActorMesh(Generator, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1})
    pusher = ActorMesh(Pusher, (generators,), {}, shape=1, resources_per_actor={"CPU": 0.1})
    try:
        state = {"w": torch.ones(16)}
        assert ray_cluster.get(pusher.methods.push.all(state)) == [[16.0, 16.0]]
        assert ray_cluster.get(pusher.methods.push_to.all(generators[0:1], state)) == [16.0]
        copy = pickle.loads(pickle.dumps(generators))  # its own load counts, none yet
        assert ray_cluster.get(copy.methods.load.choose(state)) == 16.0
    finally:
        pusher.kill()
        generators.kill()


def test_a_work_queue_choose_waits_for_a_free_actor_instead_of_failing(ray_cluster: Any) -> None:
    members = ActorMesh(
        Member, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1}, choose="work_queue"
    )
    try:
        ray_cluster.get(members.methods.whoami.all())
        first = [members.methods.f.choose(i) for i in range(2)]  # one per actor
        third = members.methods.f.choose(2)  # both busy: waits for one to finish
        ready, _ = ray_cluster.wait(first, num_returns=1, timeout=0)
        assert len(ready) >= 1
        assert ray_cluster.get([*first, third], timeout=60) == [0, 1, 2]
    finally:
        members.kill()


def test_choose_stops_picking_an_actor_found_dead(ray_cluster: Any) -> None:
    members = ActorMesh(
        Member, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1}, choose="round_robin"
    )
    try:
        ray_cluster.get(members.methods.whoami.all())
        ray_cluster.kill(members.actors[1])  # behind the mesh's back

        def seen_dead() -> bool:  # by this process: ray.kill returns before that
            try:
                ray_cluster.get(members.actors[1].whoami.remote(), timeout=60)
            except ray_cluster.exceptions.RayActorError:
                return True
            return False

        wait_until(seen_dead, 60, "this process to see the killed actor dead")
        failed = 0
        for _ in range(6):
            try:
                assert ray_cluster.get(members.methods.whoami.choose(), timeout=60) == 0
            except ray_cluster.exceptions.RayActorError:
                failed += 1  # the call that finds it dead; no later one goes there
        assert failed <= 1
    finally:
        members.kill()


def test_a_killed_sub_mesh_is_never_chosen_and_a_killed_mesh_refuses_choose(
    ray_cluster: Any,
) -> None:
    members = ActorMesh(
        Member, (), {}, shape=(2,), resources_per_actor={"CPU": 0.1}, choose="round_robin"
    )
    ray_cluster.get(members.methods.whoami.all())
    members[1:].kill()
    # kill() saw rank 1 dead: the parent mesh, which shares its counts, never picks it.
    assert [ray_cluster.get(members.methods.whoami.choose(), timeout=60) for _ in range(6)] == [
        0
    ] * 6
    members.kill()
    with pytest.raises(ray_cluster.exceptions.RayActorError, match="has died"):
        members.methods.whoami.choose()


def test_choose_on_a_streaming_method_gives_its_generator_and_frees_the_actor(
    ray_cluster: Any,
) -> None:
    mesh = ActorMesh(
        Counting, (), {}, shape=1, resources_per_actor={"CPU": 0.1}, choose="work_queue"
    )
    try:
        stream = mesh.methods.count_up.choose(3)
        assert [ray_cluster.get(ref, timeout=60) for ref in stream] == [0, 1, 2]
        # The work queue holds one call per actor: the stream's end let the next one in.
        assert ray_cluster.get(mesh.methods.f.choose(5), timeout=60) == 5
    finally:
        mesh.kill()


@pytest.mark.parametrize(
    ("options", "cls"),
    [
        ({"max_concurrency": 2}, Entering),
        # Ray takes these when the class is made remote, never in .options().
        ({"concurrency_groups": {"io": 2}}, Grouped),
    ],
    ids=["max_concurrency", "concurrency_groups"],
)
def test_the_options_of_a_ray_remote_class_reach_the_mesh_actors(
    ray_cluster: Any, tmp_path: Path, options: dict[str, Any], cls: type
) -> None:
    decorated = ray_cluster.remote(**options)(cls)
    mesh = ActorMesh(decorated, (), {}, shape=1, resources_per_actor={"CPU": 0.1})
    gate = tmp_path / "gate"
    try:
        refs = [mesh.methods.enter_and_hold.all(str(tmp_path), name, str(gate)) for name in "ab"]
        # Both run at once (one at a time, the second would wait for the gate).
        wait_until(lambda: (tmp_path / "a").exists() and (tmp_path / "b").exists(), 60, "both")
        gate.touch()
        assert ray_cluster.get([ref for pair in refs for ref in pair], timeout=60) == ["a", "b"]
    finally:
        gate.touch()
        mesh.kill()
