"""Monarch's docs example ``ping_pong.py``, as a conformance program.

A mesh of toy actors answers a call to all of them and to each one through ``slice``;
then two meshes of two actors each hold references to each other, and every actor of
one sends a message to its peer at the same coordinates of the other (a blocking call
made inside an endpoint). Every answer is checked, not only printed.
"""

from __future__ import annotations

from monarch.actor import Actor, current_rank, endpoint, this_host

NUM_ACTORS = 4


class ToyActor(Actor):
    def __init__(self):
        self.rank = current_rank().rank

    @endpoint
    def hello_world(self, msg):
        print(f"Identity: {self.rank}, {msg=}")
        return (self.rank, msg)


procs = this_host().spawn_procs(per_host={"gpus": NUM_ACTORS})
toys = procs.spawn("toy_actor", ToyActor)

greetings = toys.hello_world.call("hey there, from script!!").get()
assert sorted(greetings.values()) == [(r, "hey there, from script!!") for r in range(NUM_ACTORS)]
print("call to all:", greetings.values())

futures = []
for idx in range(NUM_ACTORS):
    one = toys.slice(gpus=idx)
    futures.append(one.hello_world.call_one(f"Here's an arbitrary unique value: {idx}"))
answers = [fut.get() for fut in futures]
assert answers == [(i, f"Here's an arbitrary unique value: {i}") for i in range(NUM_ACTORS)]
print("call_one per slice:", [rank for rank, _ in answers])


class ExampleActor(Actor):
    def __init__(self, actor_name):
        self.actor_name = actor_name
        self.received = []

    @endpoint
    def init(self, other_actor):
        self.other_actor = other_actor
        self.other_actor_pair = other_actor.slice(**current_rank())
        self.identity = current_rank().rank

    @endpoint
    def send(self, msg):
        self.other_actor_pair.recv.call(f"Sender ({self.actor_name}:{self.identity}) {msg=}").get()

    @endpoint
    def recv(self, msg):
        print(f"Pong!, Receiver ({self.actor_name}:{self.identity}) received msg {msg}")
        self.received.append(msg)

    @endpoint
    def inbox(self):
        return list(self.received)


actor_0 = this_host().spawn_procs(per_host={"gpus": 2}).spawn("actor_0", ExampleActor, "actor_0")
actor_1 = this_host().spawn_procs(per_host={"gpus": 2}).spawn("actor_1", ExampleActor, "actor_1")

actor_0.init.call(actor_1).get()
actor_1.init.call(actor_0).get()

actor_0.send.call("Ping").get()
actor_1.send.call("Ping").get()

inbox_0 = actor_0.inbox.call().get()
inbox_1 = actor_1.inbox.call().get()
for i in range(2):
    assert inbox_1.item(gpus=i) == [f"Sender (actor_0:{i}) msg='Ping'"], inbox_1
    assert inbox_0.item(gpus=i) == [f"Sender (actor_1:{i}) msg='Ping'"], inbox_0
print("Example completed successfully!")
