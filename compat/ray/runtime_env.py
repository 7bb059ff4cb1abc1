"""The Ray ActorMesh proposal: ``runtime_env`` and ``RAY_ACTOR_MESH_RANK``.

``ActorMesh(cls, args, kwargs, shape=..., runtime_env={"env_vars": {...}})``: every actor
sees the user's variables and its own ``RAY_ACTOR_MESH_RANK`` (a string, rank order),
which wins over a user value of the same name; constructor arguments (positional and
keyword) reach every actor; a dict shape gives the product of its sizes.
"""

from __future__ import annotations

import os

import ray
from ray.actor_mesh import ActorMesh, method


class Env:
    def __init__(self, greeting, *, punctuation="."):
        self.greeting = greeting + punctuation

    @method
    def read(self, *names):
        return [os.environ.get(name) for name in names]

    @method
    def greet(self):
        return f"{self.greeting} from {os.environ['RAY_ACTOR_MESH_RANK']}"


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        env = {"env_vars": {"COMPAT_COLOUR": "teal", "RAY_ACTOR_MESH_RANK": "99"}}
        mesh = ActorMesh(
            Env, ("hello",), {"punctuation": "!"}, shape={"dp": 2, "tp": 2}, runtime_env=env
        )
        assert mesh.num_actors == 4 and mesh.shape == {"dp": 2, "tp": 2}
        seen = ray.get(mesh.methods.read.all("COMPAT_COLOUR", "RAY_ACTOR_MESH_RANK"))
        print(seen)
        assert seen == [["teal", str(rank)] for rank in range(4)], seen
        greetings = ray.get(mesh.methods.greet.all())
        assert greetings == [f"hello! from {rank}" for rank in range(4)], greetings
        assert env == {"env_vars": {"COMPAT_COLOUR": "teal", "RAY_ACTOR_MESH_RANK": "99"}}
        print("runtime_env env_vars and RAY_ACTOR_MESH_RANK OK")
    finally:
        ray.shutdown()
