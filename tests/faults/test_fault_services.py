"""Services under failure (issue 26): a replica fails as a unit, is rebuilt, and no call
is lost, run twice without permission, or left waiting.

Real replicas of real worker processes; a rank is killed with SIGKILL. The suite's leak
check (``conftest.leak_check``) fails any test that leaves a process behind, including
the surviving ranks of a broken replica, which the service must kill itself. The actors
are the service tests' (``tests/services/service_actors.py``).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import actormesh
from actormesh import ReplicaFailedError, Service, ServiceUnavailableError, spawn_service

_ACTORS = str(Path(__file__).resolve().parents[1] / "services")
sys.path.insert(0, _ACTORS)
os.environ["PYTHONPATH"] = os.pathsep.join((_ACTORS, os.environ.get("PYTHONPATH", "")))

from service_actors import Replicated  # noqa: E402


class Lowest:
    """A router that keeps every call on the lowest replica offered: calls pile up there."""

    uses_key = False

    def choose(self, candidates: Any, in_flight: Any, key: Any = None) -> int:
        return min(candidates)


def _pids(service: Service, replica: int) -> list[int]:
    return list(next(s for s in service.stats() if s.replica == replica).pids)


def _kill_rank(service: Service, replica: int, rank: int = 1) -> int:
    pid = _pids(service, replica)[rank]
    os.kill(pid, signal.SIGKILL)
    return pid


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_rank_death_fails_the_call_in_flight_naming_the_replica_and_rebuilds_it_whole(
    failures: list[actormesh.Failure],
) -> None:
    with spawn_service("unit", Replicated, replicas=2, per_replica={"tp": 2},
                       router=Lowest()).get() as svc:  # fmt: skip
        old = _pids(svc, 0)
        held = svc.hold.answer("x")  # not idempotent: may not run twice
        _kill_rank(svc, 0, rank=1)
        with pytest.raises(ReplicaFailedError, match=r"replica 0 .* not marked idempotent") as info:
            held.get()
        assert info.value.replica == 0 and info.value.service == "unit"
        svc.wait_serving().get()
        stats = {s.replica: s for s in svc.stats()}
        assert stats[0].state == "serving" and stats[0].restarts == 1
        assert stats[1].restarts == 0
        new = list(stats[0].pids)
        assert len(new) == 2 and not set(new) & set(old)
        assert all(_gone(pid) for pid in old)  # the surviving rank was killed too
        # The rebuilt replica is fresh (new actors) and serves.
        assert svc.replica_actors(0).history.call().get().values() == [[], []]
        assert svc.who.answer(1).get().replica == 0
    assert failures == []  # a rebuild within budget does not bother the controller


def test_an_idempotent_call_in_flight_is_sent_again_to_a_healthy_replica() -> None:
    with spawn_service("retry", Replicated, replicas=2, per_replica={"tp": 2},
                       router="round_robin").get() as svc:  # fmt: skip
        doomed = _pids(svc, 0)
        held = svc.hold_in.answer("y", doomed)  # round robin: replica 0 first
        _kill_rank(svc, 0, rank=0)
        answer = held.get()
        assert (answer.value["x"], answer.replica, answer.attempts) == ("y", 1, 2)
        # Run once on the healthy replica (each of its two ranks), never twice there.
        assert svc.replica_actors(1).history.call().get().values() == [["y"], ["y"]]


def test_queued_calls_move_to_a_healthy_replica_and_run_once() -> None:
    with spawn_service("move", Replicated, replicas=2, per_replica={"tp": 2},
                       router=Lowest(), max_in_flight=1).get() as svc:  # fmt: skip
        held = svc.hold.answer("first")
        queued = [svc.who.answer(i) for i in range(5)]  # wait behind it on replica 0
        assert [s.queued for s in svc.stats()] == [5, 0]
        _kill_rank(svc, 0)
        with pytest.raises(ReplicaFailedError):
            held.get()
        answers = [q.get() for q in queued]
        assert [a.value["x"] for a in answers] == [0, 1, 2, 3, 4]
        assert {(a.replica, a.attempts) for a in answers} == {(1, 1)}
        seen = svc.replica_actors(1).history.call().get().values()
        assert seen == [[0, 1, 2, 3, 4]] * 2  # each once, on each rank


def test_a_session_moves_only_when_its_replica_fails() -> None:
    with spawn_service("sticky", Replicated, replicas=3, per_replica={"tp": 2},
                       router="round_robin").get() as svc:  # fmt: skip
        with svc.session() as session:
            home = session.who.answer(0).get().replica
            assert {session.who.answer(i).get().replica for i in range(4)} == {home}
            held = session.hold.answer("kv")
            _kill_rank(svc, home)
            with pytest.raises(ReplicaFailedError):
                held.get()
            moved = {session.who.answer(i).get().replica for i in range(4)}
        assert len(moved) == 1 and moved != {home}


def test_a_spent_restart_budget_leaves_no_call_waiting(
    failures: list[actormesh.Failure],
) -> None:
    with spawn_service("budget", Replicated, replicas=1, per_replica={"tp": 2},
                       max_restarts=0).get() as svc:  # fmt: skip
        held = svc.hold.answer("x")
        _kill_rank(svc, 0)
        with pytest.raises(ReplicaFailedError):
            held.get()
        svc.wait_serving().get()
        assert [s.state for s in svc.stats()] == ["failed"]
        with pytest.raises(ServiceUnavailableError, match="restart budget"):
            svc.who.route(1).get()
    assert [f.kind for f in failures] == ["restart_failed"]
    assert "budget" in str(failures[0].error)


def test_a_replica_rebuilt_during_a_refit_comes_back_with_the_new_version(
    failures: list[actormesh.Failure],
) -> None:
    slow: list[int] = []  # the processes whose load of version 1 blocks until let go

    def load(actors: Any, version: int) -> Any:
        return actors.load_in.call(version, 1, slow)

    with spawn_service("refit", Replicated, replicas=2, per_replica={"tp": 2},
                       router="round_robin", load_weights=load).get() as svc:  # fmt: skip
        slow.extend(_pids(svc, 1))
        held = svc.hold.answer("old")  # replica 0, on version 0
        refit = svc.update_weights(1)  # replica 1 starts loading (and blocks)
        _kill_rank(svc, 0)
        with pytest.raises(ReplicaFailedError):
            held.get()
        svc.wait_serving(0).get()
        # Rebuilt while the refit was still under way: it came back on the new weights.
        assert not refit.done()
        loaded = svc.replica_actors(0).who.call().get().values()
        assert [v["version"] for v in loaded] == [1, 1]
        for actors in svc.replica_actors(1).slice(tp=0), svc.replica_actors(1).slice(tp=1):
            actors.let_go.call().get()
        assert refit.get() == 1
        assert [(s.version, s.restarts) for s in svc.stats()] == [(1, 1), (1, 0)]
        answers = [svc.who.answer(i).get() for i in range(4)]
        assert {(a.version, a.value["version"]) for a in answers} == {(1, 1)}
    assert failures == []
