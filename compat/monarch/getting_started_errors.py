"""Conformance program for the fault-handling sections of Monarch's docs example
``getting_started.py``; the actors and failures here are its own.

- an endpoint raises: ``get()`` on the caller's future raises ``ActorError``, whose
  ``exception`` is the original one, and the actor goes on serving with its state;
- supervision: an actor that spawned a mesh defines ``__supervise__``; when one of its
  children fails where nobody waits for an answer (a ``broadcast``), the parent is given
  a ``MeshFailure`` and handles it by returning True, and the healthy child still
  answers afterwards;
- a failure with no supervisor to handle it goes to the client's
  ``monarch.actor.unhandled_fault_hook``. The program replaces it (``import
  monarch.actor``, then an assignment, as the docs do) with a hook that records the
  failure and returns None, so the program keeps running.
"""

from __future__ import annotations

import threading
import time

import monarch.actor
from monarch.actor import Actor, ActorError, MeshFailure, endpoint, this_host, this_proc


class Vending(Actor):
    def __init__(self):
        self.coins = 0

    @endpoint
    def insert_coin(self) -> None:
        self.coins += 1
        raise RuntimeError(f"out of stock after {self.coins} coin(s)")

    @endpoint
    def coins_kept(self) -> int:
        return self.coins


machine = this_proc().spawn("vending", Vending)
try:
    machine.insert_coin.call_one().get()
except ActorError as failure:
    print("the call failed:", type(failure).__name__, repr(failure.exception))
    assert "out of stock after 1 coin(s)" in str(failure.exception), failure.exception
else:
    raise AssertionError("insert_coin should have raised")
assert machine.coins_kept.call_one().get() == 1  # alive, and the state survived


class Fragile(Actor):
    @endpoint
    def crash(self) -> None:
        raise ValueError("fragile actor gave up")

    @endpoint
    def status(self) -> str:
        return "fine"


class Guardian(Actor):
    def __init__(self):
        self.events: list[tuple[str, str]] = []
        kids = this_host().spawn_procs(per_host={"kid": 2})
        self.kids = kids.spawn("ward", Fragile)

    def __supervise__(self, event: MeshFailure) -> bool:
        print("guardian notified:", event.mesh_name)
        self.events.append((event.mesh_name, event.report()))
        return True  # handled here; nothing goes further up

    @endpoint
    def hurt_one(self) -> None:
        self.kids.slice(kid=0).crash.broadcast()

    @endpoint
    def events_so_far(self) -> list[tuple[str, str]]:
        return list(self.events)

    @endpoint
    def check_other(self) -> str:
        return self.kids.slice(kid=1).status.call_one().get()


def poll(fetch, what: str, limit_s: float = 40.0):
    """Call ``fetch`` until it returns something truthy, or fail after ``limit_s``."""
    give_up = time.monotonic() + limit_s
    while not (found := fetch()):
        assert time.monotonic() < give_up, f"gave up waiting for {what}"
        time.sleep(0.1)
    return found


guardian = this_proc().spawn("guardian", Guardian)
assert guardian.check_other.call_one().get() == "fine"
guardian.hurt_one.call_one().get()
events = poll(lambda: guardian.events_so_far.call_one().get(), "__supervise__")
print("guardian saw:", [name for name, _ in events])
assert any(name.startswith("ward") for name, _ in events), events
assert any("fragile actor gave up" in report for _, report in events), events
assert guardian.check_other.call_one().get() == "fine"

orphaned: list[tuple[str, str]] = []
orphan_seen = threading.Event()


def note_orphan_failure(event: MeshFailure) -> None:
    print("client hook notified:", event.mesh_name)
    orphaned.append((event.mesh_name, event.report()))
    orphan_seen.set()


monarch.actor.unhandled_fault_hook = note_orphan_failure

stray = this_host().spawn_procs(per_host={"kid": 1}).spawn("stray", Fragile)
assert stray.status.call_one().get() == "fine"
stray.crash.broadcast()
assert orphan_seen.wait(40), "the unhandled fault hook never ran"
print("hook saw:", [name for name, _ in orphaned])
assert any(name.startswith("stray") for name, _ in orphaned), orphaned
assert any("fragile actor gave up" in report for _, report in orphaned), orphaned
assert machine.coins_kept.call_one().get() == 1  # the client is still in business
print("getting started: errors and supervision OK")
