"""The logging part of Monarch's docs example ``getting_started.py``.

``ProcMesh.logging_option`` is a coroutine: the example runs it with ``asyncio.run`` to
stream the workers' output to the client, aggregated over a window. Then the workers'
prints still arrive and their calls still answer, with ``stream_to_client=False`` too.

What ``stream_to_client=False`` does to the prints differs, so it is not checked here:
Monarch 0.7 stops the client's aggregated stream, but on one host the workers' lines
still reach the terminal (run here, with log forwarding on or off); actormesh drops
them (``tests/integration/test_output.py`` checks that).
"""

from __future__ import annotations

import asyncio

from monarch.actor import Actor, ProcMesh, current_rank, endpoint, this_host


class Chatty(Actor):
    @endpoint
    def say(self, text):
        print(f"worker {current_rank().rank} says {text}")
        return current_rank().rank


procs: ProcMesh = this_host().spawn_procs(per_host={"gpus": 2})
asyncio.run(procs.logging_option(stream_to_client=True, aggregate_window_sec=3))
chatty = procs.spawn("chatty", Chatty)
ranks = chatty.say.call("hello").get()
assert ranks.values() == [0, 1], ranks
asyncio.run(procs.logging_option(stream_to_client=False))
assert chatty.say.call("quiet").get().values() == [0, 1]
print("getting started: logging_option OK")
