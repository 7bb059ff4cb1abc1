# compat: actormesh-only
"""What the ActorMesh proposal's review asked for: a load-aware, pluggable ``choose``.

The proposal picks an actor at random ("this is bad and needs to be improved"); the
review suggested power-of-two-choices and pluggable policies. Here:

- by default, two slow calls made back to back with ``choose`` on a mesh of two actors
  land on different actors, round after round (each call counts as in flight until its
  ObjectRef resolves);
- ``choose="least_loaded"`` spreads three slow calls over three actors;
- ``choose="round_robin"`` and a user's own policy object (``choose(candidates,
  in_flight, key=None) -> rank``) are honoured.

Random choice fails the first check with probability 1 - 1/32, so this program is not
run on the proposal's module.
"""

from __future__ import annotations

import os
import time

import ray
from ray.actor_mesh import ActorMesh, method


class Server:
    def __init__(self):
        self.rank = int(os.environ["RAY_ACTOR_MESH_RANK"])

    @method
    def slow(self, seconds):
        time.sleep(seconds)
        return self.rank

    @method
    def who(self):
        return self.rank


class Last:
    """A user's policy: always the highest rank."""

    def choose(self, candidates, in_flight, key=None):
        return max(candidates)


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        pair = ActorMesh(Server, (), {}, shape=2)
        ray.get(pair.methods.who.all())  # both started
        for _ in range(5):
            refs = [pair.methods.slow.choose(0.3), pair.methods.slow.choose(0.3)]
            assert sorted(ray.get(refs)) == [0, 1], "both calls went to one actor"
            assert pair.wait_idle(30)  # the finished calls leave the in-flight counts
            assert pair.in_flight() == [0, 0]
        print("default choose: back-to-back calls spread over both actors")

        three = ActorMesh(Server, (), {}, shape=3, choose="least_loaded")
        ray.get(three.methods.who.all())
        refs = [three.methods.slow.choose(0.3) for _ in range(3)]
        assert sorted(ray.get(refs)) == [0, 1, 2]
        print("least_loaded: three calls on three actors")

        rr = ActorMesh(Server, (), {}, shape=3, choose="round_robin")
        picks = [ray.get(rr.methods.who.choose()) for _ in range(6)]
        assert sorted(picks) == [0, 0, 1, 1, 2, 2] and picks[:3] == picks[3:], picks
        mine = ActorMesh(Server, (), {}, shape=3, choose=Last())
        assert [ray.get(mine.methods.who.choose()) for _ in range(3)] == [2, 2, 2]
        print("round_robin and a user's policy OK")
    finally:
        ray.shutdown()
