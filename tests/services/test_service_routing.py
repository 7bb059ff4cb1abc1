"""Replica groups and routing (issue 26): real replicas, each a mesh of worker processes."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

import pytest
from service_actors import Replicated

import actormesh
from actormesh import Service, spawn_service
from actormesh.torch import setup_process_group


@pytest.fixture
def service() -> Iterator[Service]:
    svc = spawn_service("svc", Replicated, replicas=2, per_replica={"tp": 2}).get()
    try:
        yield svc
    finally:
        svc.stop().get()


def test_every_rank_of_one_replica_runs_the_call_and_rank_0_answers(service: Service) -> None:
    answer = service.who.answer("hello").get()
    assert answer.value["rank"] == 0 and answer.value["x"] == "hello"
    chosen = service.replica_actors(answer.replica)
    other = service.replica_actors(1 - answer.replica)
    assert chosen.history.call().get().values() == [["hello"], ["hello"]]
    assert other.history.call().get().values() == [[], []]
    # The two replicas are distinct processes.
    pids = {s.replica: set(s.pids) for s in service.stats()}
    assert len(pids[0]) == len(pids[1]) == 2 and not pids[0] & pids[1]


def test_round_robin_alternates_between_replicas() -> None:
    with spawn_service("rr", Replicated, replicas=3, router="round_robin").get() as svc:
        order = [svc.who.answer(i).get().replica for i in range(6)]
    assert order == [0, 1, 2, 0, 1, 2]


def test_least_loaded_counts_every_call_in_flight_through_the_service() -> None:
    with spawn_service("ll", Replicated, replicas=2, router="least_loaded").get() as svc:
        held = svc.hold.answer("first")  # occupies one replica until let go
        busy = _wait_for_in_flight(svc)
        # Every later call goes to the idle replica while the first is held there.
        others = [svc.who.answer(i).get().replica for i in range(4)]
        assert set(others) == {1 - busy}
        svc.replica_actors(busy).let_go.call().get()
        assert held.get().replica == busy


def _wait_for_in_flight(svc: Service) -> int:
    """The replica holding the one call in flight. No waiting is needed: a call is routed
    and sent on the runtime's loop in the order it was made, before stats() runs there."""
    loaded = [s.replica for s in svc.stats() if s.in_flight]
    assert len(loaded) == 1
    return loaded[0]


class Highest:
    """A user router: always the highest-numbered replica offered."""

    uses_key = False

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        self.seen.append(list(in_flight))
        return max(candidates)


def test_a_user_router_picks_the_replica() -> None:
    router = Highest()
    with spawn_service("user", Replicated, replicas=3, router=router).get() as svc:
        replicas = {svc.who.answer(i).get().replica for i in range(5)}
    assert replicas == {2}
    assert len(router.seen) == 5 and all(len(loads) == 3 for loads in router.seen)


def test_a_session_stays_on_one_replica() -> None:
    svc = spawn_service("sess", Replicated, replicas=3, router="round_robin").get()
    with svc, svc.session() as first, svc.session() as second:
        a = {first.who.answer(i).get().replica for i in range(5)}
        b = {second.who.answer(i).get().replica for i in range(5)}
    assert len(a) == 1 and len(b) == 1 and a != b


def test_reduce_combines_every_rank(service: Service) -> None:
    with spawn_service(
        "red",
        Replicated,
        replicas=1,
        per_replica={"tp": 3},
        reduce=lambda values: sorted(v["rank"] for v in values.values()),
    ).get() as svc:
        assert svc.who.route().get() == [0, 1, 2]


def test_each_replica_has_its_own_process_group() -> None:
    with spawn_service(
        "pg", Replicated, replicas=2, per_replica={"tp": 2}, setup=[setup_process_group],
        router="round_robin",
    ).get() as svc:  # fmt: skip
        answers = [svc.group.answer(1.0).get() for _ in range(2)]
    assert {a.replica for a in answers} == {0, 1}
    for answer in answers:
        assert answer.value == {"sum": 3.0, "world": 2, "rank": 0}


def test_bad_calls_fail_at_the_call_site(service: Service) -> None:
    with pytest.raises(TypeError):
        service.who.route(1, 2, 3)
    with pytest.raises(actormesh.EndpointNotFoundError):
        service.nothing  # noqa: B018
    with pytest.raises(ValueError):
        spawn_service("bad", Replicated, replicas=0)
    with pytest.raises(ValueError):
        spawn_service("bad", Replicated, replicas=1, per_replica={"tp": 0})
    with pytest.raises(ValueError):
        spawn_service("bad", Replicated, replicas=1, router="nonsense")
    with pytest.raises(TypeError):
        spawn_service("bad", dict, replicas=1)  # type: ignore[arg-type]


def test_an_endpoint_error_reaches_the_caller_and_the_replica_serves_on(
    service: Service,
) -> None:
    with pytest.raises(ValueError, match="boom"):
        service.boom.route().get()
    assert service.who.route(1).get()["x"] == 1
    assert all(s.state == "serving" and s.restarts == 0 for s in service.stats())


def test_service_errors_pickle_with_their_fields() -> None:
    import pickle

    error = actormesh.ReplicaFailedError("gone", service="gen", replica=2, reason="SIGKILL")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is actormesh.ReplicaFailedError and str(back) == "gone"
    assert (back.service, back.replica, back.reason) == ("gen", 2, "SIGKILL")
    unavailable = pickle.loads(pickle.dumps(actormesh.ServiceUnavailableError("none")))
    assert isinstance(unavailable, RuntimeError) and str(unavailable) == "none"
