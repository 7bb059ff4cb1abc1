"""``Future.get()`` inside an ``async`` endpoint, in ``monarch.actor`` 0.7.

Monarch warns that ``get()`` blocks the actor's event loop, and then does block it: the
endpoint gets the other actor's answer. actormesh does the same: an ``async`` endpoint
runs on its actor's own event loop, not on the one that reads the replies, so the
blocking ``get()`` waits for the value there and stalls only that actor.
"""

from __future__ import annotations

from monarch.actor import Actor, endpoint, this_host


class Adder(Actor):
    @endpoint
    async def add(self, a, b=0):
        return a + b

    @endpoint
    async def blocking_get_inside(self, other):
        # Monarch warns that get() blocks the actor's event loop, and does it.
        return other.add.call_one(2, b=3).get(timeout=10)


one = this_host().spawn_procs(per_host={"gpus": 1}).spawn("one", Adder)
other = this_host().spawn_procs(per_host={"gpus": 1}).spawn("other", Adder)
value = one.blocking_get_inside.call_one(other).get(timeout=20)
assert value == 5, value
print("get() inside an async endpoint OK")
