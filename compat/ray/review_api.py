# compat: actormesh-only
"""What the ActorMesh proposal's review asked for: methods without ``.methods``, indexing.

- ``mesh.f.all(...)``, ``mesh.f.choose(...)``, ``mesh.process.shard(...)`` directly on
  the mesh (the author: "ideally I'd like to get rid of this property");
- ``mesh[1, 0].foo.remote(...)``: one actor by its coordinates, a plain Ray call;
- ``mesh[1, :]``: a sub-mesh, with the same ``all``/``choose``/``shard`` over its actors
  only, and its own ``actors`` and ``num_actors``.

The proposal's module has none of these, so this program is not run on it.
"""

from __future__ import annotations

import os

import ray
from ray.actor_mesh import ActorMesh, method


def concat_dispatch_fn(actor_mesh, actor_method, *args, **kwargs):
    n = actor_mesh.num_actors
    items = list(args[0])
    pieces = [items[i * len(items) // n : (i + 1) * len(items) // n] for i in range(n)]
    refs = [
        getattr(actor, actor_method).remote(pieces[i], *args[1:], **kwargs)
        for i, actor in enumerate(actor_mesh.actors)
    ]
    return [item for part in ray.get(refs) for item in part]


class Cell:
    def __init__(self):
        self.rank = int(os.environ["RAY_ACTOR_MESH_RANK"])

    @method
    def foo(self, x):
        return (self.rank, x)

    @method(dispatch_fn=concat_dispatch_fn)
    def process(self, values, tag):
        return [(self.rank, v, tag) for v in values]


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        mesh = ActorMesh(Cell, (), {}, shape=(2, 3))
        assert [r for r, _ in ray.get(mesh.foo.all("x"))] == [0, 1, 2, 3, 4, 5]
        assert ray.get(mesh.foo.choose("y"))[1] == "y"
        shards = mesh.process.shard(list(range(6)), "t")
        assert shards == [(i, i, "t") for i in range(6)], shards
        print("mesh.f.all / choose / shard without .methods OK")

        ref = mesh[1, 0].foo.remote("one")
        assert ray.get(ref) == (3, "one")
        assert ray.get(mesh[0, 2].foo.remote("corner")) == (2, "corner")
        print("mesh[1, 0].foo.remote() OK")

        row = mesh[1, :]
        assert row.num_actors == 3 and len(row.actors) == 3
        assert [r for r, _ in ray.get(row.foo.all("row"))] == [3, 4, 5]
        assert [r for r, _ in ray.get(row.methods.foo.all("row"))] == [3, 4, 5]
        assert all(ray.get(row.foo.choose("c"))[0] in (3, 4, 5) for _ in range(6))
        assert row.process.shard([10, 20, 30], "r") == [(3, 10, "r"), (4, 20, "r"), (5, 30, "r")]
        column = mesh[:, 1]
        assert [r for r, _ in ray.get(column.foo.all("col"))] == [1, 4]
        print("sub-meshes mesh[1, :] and mesh[:, 1] OK")
    finally:
        ray.shutdown()
