"""Weight refits through a service (issue 26): ordered against calls, every answer
saying which weight version made it."""

from __future__ import annotations

from typing import Any

import pytest
from service_actors import Replicated

from actormesh import Answer, Service, spawn_service


def load(actors: Any, version: int) -> Any:
    """The service's load_weights hook: every rank of the replica takes the version."""
    return actors.load.call(version)


def _consistent(answer: Answer[Any]) -> int:
    # The version the answer claims is the one the actor held when it ran the call.
    assert answer.value["version"] == answer.version
    return answer.version


def _service(name: str, **options: Any) -> Service:
    return spawn_service(
        name, Replicated, replicas=2, per_replica={"tp": 2}, load_weights=load,
        router="round_robin", **options,
    ).get()  # fmt: skip


def test_replicas_start_at_the_service_version_and_refits_move_them_on() -> None:
    with _service("v", version=3) as svc:
        assert {_consistent(svc.who.answer(i).get()) for i in range(4)} == {3}
        assert svc.update_weights().get() == 4 and svc.version == 4
        assert {_consistent(svc.who.answer(i).get()) for i in range(4)} == {4}
        assert [s.version for s in svc.stats()] == [4, 4]
        with pytest.raises(ValueError, match="above 4"):
            svc.update_weights(4)
        with pytest.raises(ValueError, match="policy"):
            svc.update_weights(5, policy="later")  # type: ignore[arg-type]


def test_a_paused_refit_waits_for_calls_in_flight_and_holds_new_ones() -> None:
    with _service("pause") as svc:
        held = svc.hold.answer("old")  # replica 0, version 0
        refit = svc.update_weights(1, policy="pause")
        later = svc.who.answer("new")
        states = [s.state for s in svc.stats()]
        # The refit cannot finish while a call runs on the old weights, and the new call
        # is not sent anywhere meanwhile.
        assert states == ["refitting", "refitting"]
        assert not refit.done() and not later.done()
        svc.replica_actors(0).let_go.call().get()
        assert _consistent(held.get()) == 0
        assert refit.get() == 1
        assert _consistent(later.get()) == 1


def test_a_rolling_refit_keeps_serving_the_old_version_meanwhile() -> None:
    with _service("rolling") as svc:
        held = svc.hold.answer("old")  # replica 0
        refit = svc.update_weights(1, policy="rolling")
        # Replica 0 waits to load; replica 1 still serves version 0.
        meanwhile = [svc.who.answer(i).get() for i in range(3)]
        assert {(a.replica, _consistent(a)) for a in meanwhile} == {(1, 0)}
        assert not refit.done()
        svc.replica_actors(0).let_go.call().get()
        assert _consistent(held.get()) == 0
        assert refit.get() == 1
        after = [svc.who.answer(i).get() for i in range(4)]
        assert {a.replica for a in after} == {0, 1}
        assert {_consistent(a) for a in after} == {1}


def test_refits_run_in_the_order_asked() -> None:
    with _service("order") as svc:
        first, second = svc.update_weights(1), svc.update_weights(2)
        assert (first.get(), second.get()) == (1, 2)
        assert [s.version for s in svc.stats()] == [2, 2]
