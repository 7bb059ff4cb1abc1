"""Ports, channels and the low-level sends of ``monarch.actor`` 0.7.

- ``Channel.open()`` in the client: local sends, a port handed to every actor of a mesh
  through ``broadcast``, ``port.exception`` raising the very exception at ``recv``, a
  ``once`` channel, ``Channel.open_ranked()``;
- ``send(endpoint, args, kwargs, port=..., selection=...)``: every actor's answer, or one
  chosen actor's, delivered to a port;
- ``Accumulator``: a fold over the answers of a whole mesh;
- explicit response ports: ``call``/``call_one`` on an endpoint that answers through
  its ``port`` argument, and ``port.exception`` arriving as the raw exception;
- a channel opened inside an actor's ``__init__`` whose port another actor writes to.

Every check runs; the failures are listed at the end.
"""

from __future__ import annotations

import traceback

from monarch.actor import (
    Accumulator,
    Actor,
    Channel,
    Port,
    PortReceiver,
    context,
    endpoint,
    send,
    this_host,
)

failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok    {name}")
    except Exception:
        failures.append(name)
        print(f"FAIL  {name}\n{traceback.format_exc()}")


class Counter(Actor):
    def __init__(self, start):
        self.total = start + 10 * context().actor_instance.rank.rank

    @endpoint
    def add(self, k):
        self.total += k
        return self.total

    @endpoint
    def report(self, port: Port, times):
        me = context().actor_instance.rank["gpus"]
        for i in range(times):
            port.send((me, i))

    @endpoint(explicit_response_port=True)
    def doubled(self, port: Port, x):
        port.send(2 * x)

    @endpoint(explicit_response_port=True)
    def refuse(self, port: Port, x):
        port.exception(KeyError(f"no {x}"))


class Inbox(Actor):
    def __init__(self):
        self.port, self.receiver = Channel.open()

    @endpoint
    def address(self):
        return self.port

    @endpoint
    def take(self, n):
        return [self.receiver.recv().get(timeout=10) for _ in range(n)]


class Writer(Actor):
    @endpoint
    def write(self, port: Port, value):
        port.send(value)


mesh = this_host().spawn_procs(per_host={"gpus": 2}).spawn("counter", Counter, 100)


def local_channel():
    port, receiver = Channel.open()
    assert isinstance(port, Port) and isinstance(receiver, PortReceiver)
    port.send("first")
    port.send("second")
    assert [receiver.recv().get(timeout=5) for _ in range(2)] == ["first", "second"]


def port_through_broadcast():
    port, receiver = Channel.open()
    mesh.report.broadcast(port, 2)
    got = sorted(receiver.recv().get(timeout=10) for _ in range(4))
    assert got == [(0, 0), (0, 1), (1, 0), (1, 1)], got


def port_exception_is_raised_as_is():
    port, receiver = Channel.open()
    port.exception(LookupError("nothing here"))
    try:
        receiver.recv().get(timeout=5)
    except LookupError as e:
        assert str(e) == "nothing here"
        return
    raise AssertionError("recv should raise the LookupError")


def once_channel():
    port, receiver = Channel.open(once=True)
    port.send(1)
    assert receiver.recv().get(timeout=5) == 1


def send_to_all_and_to_one():
    port, receiver = Channel.open()
    send(mesh.add, (1,), {}, port=port, selection="all")
    assert sorted(receiver.recv().get(timeout=10) for _ in range(2)) == [101, 111]
    send(mesh.add, args=(5,), kwargs={}, port=port, selection="choose")
    assert receiver.recv().get(timeout=10) in (106, 116)
    try:
        receiver.recv().get(timeout=0.5)
    except TimeoutError:
        return
    raise AssertionError("choose should have sent to one actor only")


def ranked_channel():
    port, receiver = Channel.open_ranked()
    send(mesh.add, (0,), {}, port=port)
    got = sorted(receiver.recv().get(timeout=10) for _ in range(2))
    assert [rank for rank, _ in got] == [0, 1], got


def accumulator():
    totals = mesh.add.call(0).get().values()
    folded = Accumulator(mesh.add, 0, lambda acc, x: acc + x).accumulate(0).get(timeout=10)
    assert folded == sum(totals), (folded, totals)


def explicit_response_port():
    assert mesh.doubled.call(21).get().values() == [42, 42]
    assert mesh.slice(gpus=1).doubled.call_one(4).get() == 8


def explicit_port_exception():
    try:
        mesh.slice(gpus=0).refuse.call_one("key").get()
    except KeyError as e:
        assert "no key" in str(e)
        return
    raise AssertionError("the caller should get the KeyError itself")


def channel_opened_in_an_actor():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    inbox = procs.spawn("inbox", Inbox)
    writer = procs.spawn("writer", Writer)
    address = inbox.address.call_one().get()
    writer.write.call_one(address, "hello").get()
    writer.write.call_one(address, "again").get()
    assert inbox.take.call_one(2).get() == ["hello", "again"]


for name, fn in list(globals().items()):
    is_check = callable(fn) and getattr(fn, "__module__", None) == __name__
    if is_check and name[0].islower() and name != "check":
        check(name, fn)

print(f"{len(failures)} check(s) failed: {failures}" if failures else "all port checks OK")
raise SystemExit(1 if failures else 0)
