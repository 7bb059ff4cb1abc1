"""Scaling a service and reading its figures (issue 26)."""

from __future__ import annotations

import pytest
from service_actors import Replicated

from actormesh import spawn_service


def test_scale_up_adds_replicas_that_serve_at_the_current_version() -> None:
    def load(actors: object, version: int) -> object:
        return actors.load.call(version)  # type: ignore[attr-defined]

    with spawn_service("up", Replicated, replicas=1, per_replica={"tp": 2},
                       router="round_robin", load_weights=load).get() as svc:  # fmt: skip
        svc.update_weights(5).get()
        svc.scale(3).get()
        stats = svc.stats()
        assert [(s.replica, s.state, s.version) for s in stats] == [
            (0, "serving", 5), (1, "serving", 5), (2, "serving", 5),
        ]  # fmt: skip
        answers = [svc.who.answer(i).get() for i in range(6)]
        assert {a.replica for a in answers} == {0, 1, 2}
        assert {(a.version, a.value["version"]) for a in answers} == {(5, 5)}


def test_scale_down_drains_without_dropping_a_call() -> None:
    with spawn_service("down", Replicated, replicas=2, per_replica={"tp": 2},
                       router="round_robin").get() as svc:  # fmt: skip
        first = svc.who.answer("a").get()  # replica 0; the next goes to replica 1
        held = svc.hold.answer("held")  # in flight on replica 1, the one to go
        assert (first.replica, [s.in_flight for s in svc.stats()]) == (0, [0, 1])
        shrink = svc.scale(1)
        later = [svc.who.answer(i) for i in range(4)]
        assert [(s.replica, s.state) for s in svc.stats()] == [(0, "serving"), (1, "draining")]
        assert not shrink.done()  # it waits for the call it holds
        svc.replica_actors(1).let_go.call().get()
        assert held.get().replica == 1  # answered, not dropped
        shrink.get()
        assert {a.get().replica for a in later} == {0}
        assert [s.replica for s in svc.stats()] == [0]
        svc.scale(0).get()
        assert svc.stats() == []


def test_stats_count_calls_per_replica() -> None:
    with spawn_service("stats", Replicated, replicas=2, per_replica={"tp": 2},
                       router="round_robin").get() as svc:  # fmt: skip
        for i in range(6):
            svc.who.route(i).get()
        with pytest.raises(ValueError):
            svc.boom.route().get()
        stats = svc.stats()
        assert [s.completed for s in stats] == [3, 3]
        assert [s.failed for s in stats] == [1, 0]
        assert all(s.requests_per_s > 0 and s.queued == 0 and s.in_flight == 0 for s in stats)
        assert all(len(s.pids) == 2 and s.restarts == 0 and s.version == 0 for s in stats)


def test_a_replica_coming_into_service_takes_a_share_of_the_calls_waiting() -> None:
    with spawn_service("share", Replicated, replicas=1, per_replica={"tp": 2}).get() as svc:
        held = svc.hold.answer("held")
        waiting = [svc.who.answer(i) for i in range(4)]  # queued behind it on replica 0
        assert [s.queued for s in svc.stats()] == [4]
        svc.scale(2).get()
        # The new replica took its share as it came into service (replica 0 is held).
        first, second = svc.stats()
        assert first.queued < 4 and second.queued + second.in_flight + second.completed > 0
        svc.replica_actors(0).let_go.call().get()
        assert held.get().replica == 0
        answers = [w.get() for w in waiting]
        assert sorted(a.value["x"] for a in answers) == [0, 1, 2, 3]
        assert {a.replica for a in answers} >= {1}
