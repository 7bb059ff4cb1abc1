"""The Ray ActorMesh proposal's results are plain Ray ``ObjectRef``s.

- ``mesh.actors[i]`` is a Ray actor handle: ``mesh.actors[1].f.remote(x)``;
- the refs from ``all`` go to ``ray.wait`` and, as arguments, to a ``@ray.remote`` task
  (resolved to values there) and to another mesh's actors;
- ``@method(num_returns=2)`` (an option passed on to ``ray.method``): ``all`` gives one
  pair of refs per actor, ``choose`` one pair;
- an exception in an actor arrives at ``ray.get`` as Ray's error, which is also the
  original exception type.
"""

from __future__ import annotations

import ray
from ray.actor_mesh import ActorMesh, method


class Worker:
    def __init__(self, base):
        self.base = base

    @method
    def f(self, x):
        return self.base + x

    @method(num_returns=2)
    def split(self, x):
        return x // 10, x % 10

    @method
    def fail(self):
        raise KeyError("nope")


@ray.remote
def total(*values):
    return sum(values)


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        mesh = ActorMesh(Worker, (100,), {}, shape=3)
        assert mesh.shape == (3,)
        assert ray.get(mesh.actors[1].f.remote(7)) == 107

        refs = mesh.methods.f.all(1)
        ready, pending = ray.wait(refs, num_returns=3, timeout=30)
        assert len(ready) == 3 and not pending
        assert ray.get(total.remote(*refs)) == 303

        other = ActorMesh(Worker, (1000,), {}, shape=(3,))
        chained = [actor.f.remote(ref) for actor, ref in zip(other.actors, mesh.methods.f.all(2))]
        assert ray.get(chained) == [1102, 1102, 1102]

        pairs = mesh.methods.split.all(42)
        assert len(pairs) == 3 and all(len(pair) == 2 for pair in pairs)
        assert [ray.get(pair) for pair in pairs] == [[4, 2]] * 3
        tens, ones = mesh.methods.split.choose(57)
        assert ray.get([tens, ones]) == [5, 7]

        try:
            ray.get(mesh.methods.fail.choose())
            raise AssertionError("fail() should raise")
        except KeyError as e:
            assert isinstance(e, ray.exceptions.RayTaskError)
        print("actors[i], ray.wait, refs into tasks and meshes, num_returns=2 OK")
    finally:
        ray.shutdown()
