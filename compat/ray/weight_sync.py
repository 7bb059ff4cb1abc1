# compat: actormesh-only
"""What the ActorMesh proposal's review asked for: weight sync between two meshes.

A trainer mesh of 2 ranks holds a model's weights in 2 shards (rank s holds shard s); an
inference mesh of shape (2, 2) is 2 replicas of 2 shards each. After each training step
every inference actor ``inference[r, s]`` loads shard s straight from trainer rank s (the
trainer's ObjectRef is passed as the argument, so the weights never pass through the
driver), and every replica then answers like the trainer's own weights do.
"""

from __future__ import annotations

import os

import ray
import torch
from ray.actor_mesh import ActorMesh, method

DIM = 8


class Trainer:
    def __init__(self):
        self.shard = int(os.environ["RAY_ACTOR_MESH_RANK"])
        torch.manual_seed(self.shard)
        self.weights = torch.randn(DIM // 2)
        self.version = 0

    @method
    def step(self, lr):
        self.weights -= lr * self.weights.sign()
        self.version += 1
        return self.version

    @method
    def get_shard(self):
        return self.version, self.weights.clone()

    @method
    def partial(self, x):
        return float(self.weights @ x[self.shard * DIM // 2 : (self.shard + 1) * DIM // 2])


class Inference:
    def __init__(self):
        self.weights = torch.zeros(DIM // 2)
        self.version = -1

    @method
    def load(self, versioned):
        self.version, self.weights = versioned
        return self.version

    @method
    def partial(self, x, shard):
        return self.version, float(self.weights @ x[shard * DIM // 2 : (shard + 1) * DIM // 2])


def sync(trainer, inference):
    loads = [
        inference[replica, shard].load.remote(trainer[shard].get_shard.remote())
        for replica in range(2)
        for shard in range(2)
    ]
    return ray.get(loads)


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        trainer = ActorMesh(Trainer, (), {}, shape=(2,))
        inference = ActorMesh(Inference, (), {}, shape={"replica": 2, "shard": 2})
        x = torch.arange(DIM, dtype=torch.float32)
        for step in range(1, 4):
            versions = ray.get(trainer.step.all(0.1))
            assert versions == [step, step]
            assert sync(trainer, inference) == [step] * 4
            expected = sum(ray.get(trainer.partial.all(x)))
            for replica in range(2):
                row = inference[replica, :]
                answers = ray.get([row[s].partial.remote(x, s) for s in range(2)])
                assert [v for v, _ in answers] == [step, step]
                got = sum(p for _, p in answers)
                assert abs(got - expected) < 1e-5, (replica, got, expected)
            print(f"step {step}: trainer and both replicas agree ({expected:.4f})")
    finally:
        ray.shutdown()
