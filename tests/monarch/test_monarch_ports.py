"""``Channel``, ``Port``, ``PortReceiver`` and ``send``: messages to a receiver from the
controller and from actors, in order per sender, as in Monarch 0.7."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from actormesh.actor import Channel, Port, PortReceiver, ProcMesh, send
from actormesh.testing import run

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo, PortUser, SyncCounter
else:
    from monarch_actors import Echo, PortUser, SyncCounter

ALL_POINTS = [
    {"nodes": 0, "gpus": 0},
    {"nodes": 0, "gpus": 1},
    {"nodes": 1, "gpus": 0},
    {"nodes": 1, "gpus": 1},
]


@pytest.fixture(scope="module")
def users(procs: ProcMesh) -> PortUser:
    return procs.spawn("users", PortUser)


def test_channel_open_gives_a_port_and_its_receiver() -> None:
    port: Port[str]
    port, receiver = Channel.open()
    assert isinstance(port, Port)
    assert isinstance(receiver, PortReceiver)
    port.send("local")
    assert receiver.recv().get(timeout=30) == "local"


def test_messages_sent_before_recv_wait_for_it_in_order() -> None:
    port: Port[int]
    port, receiver = Channel.open()
    for i in range(5):
        port.send(i)
    assert [receiver.recv().get(timeout=30) for _ in range(5)] == [0, 1, 2, 3, 4]


def test_port_exception_makes_recv_raise_that_exception() -> None:
    port: Port[int]
    port, receiver = Channel.open()
    port.exception(ValueError("x"))
    with pytest.raises(ValueError, match=r"^x$") as caught:
        receiver.recv().get(timeout=30)
    assert type(caught.value) is ValueError


def test_a_recv_that_timed_out_still_gets_the_next_message() -> None:
    port: Port[str]
    port, receiver = Channel.open()
    future = receiver.recv()
    with pytest.raises(TimeoutError):
        future.get(timeout=0.1)
    port.send("late")
    assert future.get(timeout=30) == "late"


def test_recv_can_be_awaited() -> None:
    port: Port[int]
    port, receiver = Channel.open()

    async def main() -> int:
        port.send(7)
        value: int = await receiver.recv()
        return value

    assert run(main()) == 7


def test_a_once_port_delivers_its_first_message() -> None:
    port: Port[int]
    port, receiver = Channel.open(once=True)
    port.send(1)
    assert receiver.recv().get(timeout=30) == 1


def test_a_once_port_refuses_a_second_message() -> None:
    port: Port[int]
    port, receiver = Channel.open(once=True)
    port.send(1)
    with pytest.raises(RuntimeError, match="already used"):
        port.send(2)
    assert receiver.recv().get(timeout=30) == 1


def test_a_port_passed_to_a_broadcast_gets_messages_from_every_actor(users: PortUser) -> None:
    port: Port[tuple[dict[str, int], int]]
    port, receiver = Channel.open()
    users.send_many.broadcast(port, 2)
    got = [receiver.recv().get(timeout=30) for _ in range(8)]
    assert sorted((sorted(p.items()), i) for p, i in got) == sorted(
        (sorted(p.items()), i) for p in ALL_POINTS for i in range(2)
    )


def test_many_messages_from_one_actor_arrive_in_send_order(users: PortUser) -> None:
    port: Port[tuple[dict[str, int], int]]
    port, receiver = Channel.open()
    sender = users.slice(nodes=1, gpus=0)
    assert sender.send_many.call_one(port, 1000).get(timeout=30) == 1000
    got = [receiver.recv().get(timeout=30) for _ in range(1000)]
    assert [i for _, i in got] == list(range(1000))


def test_messages_from_each_of_many_actors_arrive_in_that_actors_order(users: PortUser) -> None:
    port: Port[tuple[dict[str, int], int]]
    port, receiver = Channel.open()
    users.send_many.broadcast(port, 200)
    by_sender: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for _ in range(800):
        point, i = receiver.recv().get(timeout=30)
        by_sender.setdefault(tuple(sorted(point.items())), []).append(i)
    assert len(by_sender) == 4
    assert all(values == list(range(200)) for values in by_sender.values())


def test_a_port_passed_to_a_constructor_reaches_the_controller(procs: ProcMesh) -> None:
    port: Port[tuple[str, int]]
    port, receiver = Channel.open()
    holders = procs.spawn("holders", PortUser, port)
    holders.send_to_constructor_port.call("hello").get(timeout=30)
    got = sorted(receiver.recv().get(timeout=30) for _ in range(4))
    assert got == [("hello", rank) for rank in range(4)]


def test_a_port_returned_by_an_actor_reaches_that_actor(users: PortUser) -> None:
    one = users.slice(nodes=0, gpus=1)
    port: Port[Any] = one.my_port.call_one().get(timeout=30)
    assert isinstance(port, Port)
    receiving = one.receive.call_one(300)
    for i in range(300):
        port.send(i)
    assert receiving.get(timeout=30) == list(range(300))


def test_an_actor_sends_an_error_to_a_port(users: PortUser) -> None:
    port: Port[Any]
    port, receiver = Channel.open()
    users.slice(nodes=0, gpus=0).send_error.call_one(port, "from actor").get(timeout=30)
    with pytest.raises(ValueError, match="from actor"):
        receiver.recv().get(timeout=30)


def test_an_async_actor_receives_on_its_own_channel(procs: ProcMesh, users: PortUser) -> None:
    collector = procs.spawn("collector", PortUser).slice(nodes=1, gpus=1)
    got = collector.gather_from.call_one(users, 3).get(timeout=30)
    assert len(got) == 12
    assert sorted(i for _, i in got) == sorted([0, 1, 2] * 4)


def test_a_sync_actor_receives_on_its_own_channel(procs: ProcMesh, users: PortUser) -> None:
    collector = procs.spawn("sync_collector", SyncCounter).slice(nodes=0, gpus=1)
    got = collector.collect.call_one(users.slice(nodes=1), 5).get(timeout=30)
    assert sorted((p["gpus"], i) for p, i in got) == sorted(
        (g, i) for g in range(2) for i in range(5)
    )


def test_send_with_a_port_sends_each_actors_answer_there(procs: ProcMesh) -> None:
    counters = procs.spawn("send_all", Echo)
    port: Port[int]
    port, receiver = Channel.open()
    send(counters.inc, (10,), {}, port=port, selection="all")
    assert sorted(receiver.recv().get(timeout=30) for _ in range(4)) == [10] * 4
    send(counters.inc, (), {"k": 5}, port=port)
    assert sorted(receiver.recv().get(timeout=30) for _ in range(4)) == [15] * 4


def test_send_with_choose_calls_exactly_one_actor(procs: ProcMesh) -> None:
    counters = procs.spawn("send_choose", Echo)
    port: Port[int]
    port, receiver = Channel.open()
    send(counters.inc, (1,), {}, port=port, selection="choose")
    assert receiver.recv().get(timeout=30) == 1
    # Messages from one sender keep their order: these calls come after the chosen one.
    assert sum(counters.inc.call(0).get(timeout=30).values()) == 1


def test_send_without_a_port_is_fire_and_forget(procs: ProcMesh) -> None:
    counters = procs.spawn("send_nowhere", Echo)
    send(counters.inc, (3,), {})
    assert counters.inc.call(0).get(timeout=30).values() == [3] * 4


def test_a_ranked_channel_gives_each_answer_with_its_rank(procs: ProcMesh) -> None:
    echo = procs.spawn("ranked", Echo)
    port: Port[str]
    receiver: Any
    port, receiver = Channel.open_ranked()
    send(echo.get_tag, (), {}, port=port)
    assert sorted(receiver.recv().get(timeout=30) for _ in range(4)) == [
        (rank, "echo") for rank in range(4)
    ]


def test_a_ranked_channel_ranks_answers_within_the_slice_sent_to(procs: ProcMesh) -> None:
    echo = procs.spawn("ranked_slice", Echo)
    port: Port[str]
    receiver: Any
    port, receiver = Channel.open_ranked()
    send(echo.slice(nodes=1).get_tag, (), {}, port=port)
    assert sorted(receiver.recv().get(timeout=30) for _ in range(2)) == [(0, "echo"), (1, "echo")]


# -- a receive claims its message when it is first observed, not when it is made --------


@pytest.mark.timeout(30)
def test_receives_observed_in_reverse_get_the_messages_in_observation_order() -> None:
    port: Port[int]
    port, receiver = Channel.open()
    port.send(11)
    port.send(22)
    first, second = receiver.recv(), receiver.recv()
    assert second.get(timeout=10) == 11
    assert first.get(timeout=10) == 22


@pytest.mark.timeout(30)
@pytest.mark.parametrize("once", [False, True])
def test_a_receive_dropped_unobserved_takes_nothing(once: bool) -> None:
    port: Port[int]
    port, receiver = Channel.open(once=once)
    port.send(31)
    discarded = receiver.recv()
    assert not discarded.done()  # looking at it is not observing it
    del discarded
    assert receiver.recv().get(timeout=10) == 31


@pytest.mark.timeout(30)
def test_each_way_of_observing_a_receive_claims_the_next_message() -> None:
    port: Port[int]
    port, receiver = Channel.open()
    unobserved = receiver.recv()
    by_callback, by_await, by_get = receiver.recv(), receiver.recv(), receiver.recv()
    seen: list[int] = []
    by_callback.add_done_callback(lambda f: seen.append(f.result()))
    for i in range(4):
        port.send(i)
    assert by_callback.get(timeout=10) == 0
    assert seen == [0]  # callbacks run in the order they were added: it ran first

    async def main() -> int:
        value: int = await by_await
        return value

    assert run(main()) == 1
    assert by_get.get(timeout=10) == 2
    assert unobserved.get(timeout=10) == 3


@pytest.mark.timeout(30)
def test_a_ranked_receive_claims_when_observed() -> None:
    port: Port[str]
    receiver: Any
    port, receiver = Channel.open_ranked()
    port.send("a")
    port.send("b")
    first, second = receiver.recv(), receiver.recv()
    assert second.get(timeout=10) == (0, "a")
    assert first.get(timeout=10) == (0, "b")


@pytest.mark.timeout(30)
def test_a_receive_awaited_past_its_deadline_leaves_its_message_to_the_next() -> None:
    # asyncio.wait_for cancels the await, which gives the receive's turn up: the message
    # sent afterwards goes to the next receive instead of being lost.
    port: Port[str]
    port, receiver = Channel.open()

    async def main() -> str:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(receiver.recv(), timeout=0.05)
        port.send("kept")
        value: str = await receiver.recv()
        return value

    assert run(main()) == "kept"


@pytest.mark.timeout(60)
def test_an_actor_answers_a_receive_observed_after_the_send(users: PortUser) -> None:
    port: Port[tuple[dict[str, int], int]]
    port, receiver = Channel.open()
    pending = [receiver.recv() for _ in range(3)]  # made first, observed last
    sender = users.slice(nodes=0, gpus=1)
    assert sender.send_many.call_one(port, 3).get(timeout=30) == 3
    assert [f.get(timeout=30)[1] for f in reversed(pending)] == [0, 1, 2]
