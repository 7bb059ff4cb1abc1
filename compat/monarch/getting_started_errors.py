"""The supervision parts of Monarch's docs example ``getting_started.py``.

- an endpoint that raises: the caller's ``get()`` raises ``ActorError`` (carrying the
  original exception), and the actor lives on;
- fine-grained supervision: an actor that owns a mesh defines ``__supervise__``; when a
  child fails (an exception in a ``broadcast``, which has no caller to report to), the
  owner receives a ``MeshFailure`` and handles it (returns True), and the children that
  did not fail keep answering;
- a failure nobody handles reaches the client's ``monarch.actor.unhandled_fault_hook``,
  replaced here (``import monarch.actor`` then assignment, as the example does) by one
  that records the failure and returns, so the program carries on.
"""

from __future__ import annotations

import threading
import time

import monarch.actor
from monarch.actor import Actor, ActorError, MeshFailure, endpoint, this_host, this_proc


class Errorful(Actor):
    def __init__(self):
        self.calls = 0

    @endpoint
    def say_hello(self):
        self.calls += 1
        raise Exception("I don't want to")

    @endpoint
    def count(self):
        return self.calls


e = this_proc().spawn("errorful", Errorful)
try:
    e.say_hello.call_one().get()
    raise AssertionError("say_hello should have raised")
except ActorError as err:
    print("It didn't say hello:", type(err).__name__, repr(err.exception))
    assert "I don't want to" in str(err.exception)
assert e.count.call_one().get() == 1  # still alive, state kept


class Child(Actor):
    @endpoint
    def fail(self):
        raise RuntimeError("child failed on purpose")

    @endpoint
    def ping(self):
        return "pong"


class SupervisorActor(Actor):
    def __init__(self):
        self.failures = []
        self.children = this_host().spawn_procs(per_host={"gpus": 2}).spawn("child", Child)

    def __supervise__(self, failure: MeshFailure):
        print(f"Failure received: {failure}")
        self.failures.append((failure.mesh_name, failure.report()))
        return True

    @endpoint
    def break_child(self):
        self.children.slice(gpus=1).fail.broadcast()

    @endpoint
    def failures_seen(self):
        return list(self.failures)

    @endpoint
    def ping_healthy_child(self):
        return self.children.slice(gpus=0).ping.call_one().get()


def wait_for(predicate, what, timeout=40.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


supervisor = this_proc().spawn("supervisor", SupervisorActor)
assert supervisor.ping_healthy_child.call_one().get() == "pong"
supervisor.break_child.call_one().get()
seen = []
wait_for(lambda: seen.extend(supervisor.failures_seen.call_one().get()) or seen, "__supervise__")
print("supervisor saw:", [name for name, _ in seen])
assert any(name.startswith("child") for name, _ in seen), seen
assert any("child failed on purpose" in report for _, report in seen), seen
assert supervisor.ping_healthy_child.call_one().get() == "pong"

hook_calls = []
hook_called = threading.Event()


def my_unhandled_fault_hook(failure: MeshFailure) -> None:
    print(f"Mesh failure was not handled: {failure.mesh_name}")
    hook_calls.append((failure.mesh_name, failure.report()))
    hook_called.set()


monarch.actor.unhandled_fault_hook = my_unhandled_fault_hook

orphan = this_host().spawn_procs(per_host={"gpus": 1}).spawn("orphan", Child)
assert orphan.ping.call_one().get() == "pong"
orphan.fail.broadcast()
assert hook_called.wait(40), "unhandled_fault_hook was not called"
print("hook saw:", [name for name, _ in hook_calls])
assert any(name.startswith("orphan") for name, _ in hook_calls), hook_calls
assert any("child failed on purpose" in report for _, report in hook_calls), hook_calls
assert e.count.call_one().get() == 1  # the client carries on
print("getting started: errors and supervision OK")
