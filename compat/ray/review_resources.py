# compat: actormesh-only
"""What the ActorMesh proposal left as a TODO: ``resources_per_actor`` honoured.

The proposal accepts ``resources_per_actor`` and ignores it. Here a mesh of two actors
each reserving half a CPU and one unit of a custom resource holds exactly that: each
actor is assigned those resources, and the cluster has that much less available.
"""

from __future__ import annotations

import time

import ray
from ray.actor_mesh import ActorMesh, method


class Holder:
    @method
    def assigned(self):
        return ray.get_runtime_context().get_assigned_resources()


if __name__ == "__main__":
    ray.init(num_cpus=2, resources={"slot": 3}, include_dashboard=False)
    try:
        mesh = ActorMesh(Holder, (), {}, shape=(2,), resources_per_actor={"CPU": 0.5, "slot": 1})
        assigned = ray.get(mesh.methods.assigned.all())
        print("assigned:", assigned)
        assert all(a == {"CPU": 0.5, "slot": 1.0} for a in assigned), assigned
        deadline = time.monotonic() + 15
        while True:
            free = ray.available_resources()
            if free.get("slot") == 1.0 and free.get("CPU") == 1.0:
                break
            assert time.monotonic() < deadline, f"available resources: {free}"
            time.sleep(0.2)
        print("available after the mesh:", {k: free[k] for k in ("CPU", "slot")})
    finally:
        ray.shutdown()
