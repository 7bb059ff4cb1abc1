"""Monarch's docs example ``grpo_actor.py`` (a PPO-like RL loop), small and on CPU.

Actors on two process meshes: a trajectory queue, a replay buffer, a scorer and a
learner on one, two generators on the other. The generators sample actions with their
copy of the policy and queue them; the scorer rewards them into the replay buffer; the
learner samples the buffer, takes a PPO step, and has the generators pull its new
weights through ``RDMABuffer``s it handed out once (a dict of ``(tensor, RDMABuffer)``
returned from an endpoint and passed to the generators' constructor). ActorMeshes are
passed to constructors and endpoints; every endpoint is ``async``; the driver is
``asyncio.run(main())``.

Changes from the docs example, so that it runs on Monarch 0.7 itself:

- the scorer's endpoint ``stop`` is named ``stop_scoring``: on 0.7 an endpoint named
  ``stop`` collides with ``ActorMesh.stop`` and spawning fails;
- the endpoints that wait for another message (``TrajectoryQueue.get``,
  ``ReplayBuffer.sample_from``, ``Scorer.run``, ``Generator.generate`` and
  ``Generator.update``) are ``@concurrent_endpoint``s: 0.7 runs one message at a time
  per actor, so with plain endpoints a generator waiting in ``generate`` never gets the
  ``update`` that would let it go on, and the example deadlocks;
- ``stop_scoring`` also queues a ``None`` that ends the scorer's pending ``get`` at once
  (the example waits out a 10 s timeout);
- CPU instead of CUDA, 3 steps, group size 4; and it checks its results: finite losses,
  the policy version advancing, and after the last update every generator's weights
  equal to the learner's (the RDMA sync worked).
"""

from __future__ import annotations

import asyncio
import copy
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.optim as optim
from monarch.actor import Actor, concurrent_endpoint, endpoint, this_host
from monarch.rdma import RDMABuffer
from torch.distributions import Categorical, kl_divergence

G = 4  # actions sampled per state
STATE_DIM = 4
ACTION_DIM = 4
STEPS = 3


def policy_net():
    return nn.Sequential(nn.Linear(STATE_DIM, 16), nn.Tanh(), nn.Linear(16, ACTION_DIM))


def checksum(model):
    return float(sum(p.detach().double().sum() for p in model.state_dict().values()))


@dataclass
class TrajectorySlice:
    policy_version: int
    state: torch.Tensor
    actions: torch.Tensor
    old_logps: torch.Tensor
    rewards: torch.Tensor


class TrajectoryQueue(Actor):
    def __init__(self):
        self.queue = asyncio.Queue()

    @endpoint
    async def put(self, item):
        await self.queue.put(item)

    @concurrent_endpoint
    async def get(self):
        return await self.queue.get()


class ReplayBuffer(Actor):
    def __init__(self):
        self.storage = []
        self.filled = asyncio.Event()

    @endpoint
    async def put(self, item: TrajectorySlice) -> None:
        self.storage.append((item.policy_version, item))
        self.filled.set()

    @concurrent_endpoint
    async def sample_from(self, k: int) -> list:
        try:
            await asyncio.wait_for(self.filled.wait(), timeout=20.0)
        except TimeoutError:
            raise RuntimeError("timeout waiting for the replay buffer to fill") from None
        weights = [version + 1 for version, _ in self.storage]  # newer is likelier
        chosen = random.choices(range(len(self.storage)), weights=weights, k=k)
        return [self.storage[i][1] for i in chosen]


class Scorer(Actor):
    def __init__(self, trajectory_queue, replay_buffer):
        self.trajectory_queue = trajectory_queue
        self.replay_buffer = replay_buffer
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Linear(STATE_DIM + 1, 8), nn.Tanh(), nn.Linear(8, 1))
        self.running = False
        self.scored = 0

    async def _score(self, item: TrajectorySlice) -> None:
        states = item.state.unsqueeze(0).repeat(G, 1)
        actions = item.actions.float().unsqueeze(-1)
        with torch.no_grad():
            rewards = self.net(torch.cat([states, actions], dim=-1)).squeeze(-1)
        scored = TrajectorySlice(
            item.policy_version, item.state, item.actions, item.old_logps, rewards
        )
        await self.replay_buffer.put.call(scored)
        self.scored += 1

    @concurrent_endpoint
    async def run(self) -> int:
        if self.running:
            return self.scored
        self.running = True
        try:
            while self.running:
                try:
                    item = await asyncio.wait_for(
                        self.trajectory_queue.get.call_one(), timeout=10.0
                    )
                except TimeoutError:
                    continue
                if item is None:  # queued by stop_scoring
                    break
                await self._score(item)
        finally:
            self.running = False
        return self.scored

    @endpoint
    async def stop_scoring(self) -> None:
        self.running = False
        await self.trajectory_queue.put.call(None)


class Learner(Actor):
    def __init__(self, replay_buffer):
        torch.manual_seed(2)
        self.model = policy_net()
        self.ref_model = copy.deepcopy(self.model)
        for p in self.ref_model.parameters():
            p.requires_grad = False
        self.optim = optim.Adam(self.model.parameters(), lr=1e-2, eps=1e-5)
        self.eps = 0.2
        self.kl_coeff = 0.1
        self.policy_version = 0
        self.replay_buffer = replay_buffer
        self.batch_size = 2
        self.generators = None
        self._weights_handle = {}

    @endpoint
    async def init_generators(self, generators) -> None:
        self.generators = generators

    @endpoint
    async def weights_handle(self) -> dict:
        # state_dict() tensors share the parameters' memory: the buffers follow training.
        self._weights_handle = {
            name: (t, RDMABuffer(t.view(torch.uint8).flatten()))
            for name, t in self.model.state_dict().items()
        }
        return self._weights_handle

    @endpoint
    async def weights_checksum(self) -> tuple:
        return self.policy_version, checksum(self.model)

    def _advantages(self, rewards):
        grouped = rewards.view(-1, G)
        adv = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)
        return (adv - adv.mean()) / (adv.std() + 1e-8) if adv.numel() > 1 else adv

    @endpoint
    async def step(self) -> torch.Tensor:
        if self.generators is not None:
            await self.generators.update.call(self.policy_version)
        slices = await self.replay_buffer.sample_from.call_one(self.batch_size)
        states = torch.stack([s.state for s in slices]).repeat_interleave(G, 0)
        actions = torch.cat([s.actions for s in slices])
        old_logps = torch.cat([s.old_logps for s in slices])
        advantages = self._advantages(torch.cat([s.rewards for s in slices]))

        dist = Categorical(logits=self.model(states))
        ratio = (dist.log_prob(actions) - old_logps).exp()
        clipped = torch.clamp(ratio, 1 - self.eps, 1 + self.eps) * advantages
        ppo_loss = -torch.min(ratio * advantages, clipped).mean()
        with torch.no_grad():
            ref_logits = self.ref_model(states)
        kl = kl_divergence(Categorical(logits=ref_logits), dist).mean()
        loss = ppo_loss + self.kl_coeff * kl
        self.optim.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optim.step()
        self.policy_version += 1
        return loss.detach()


READY_TO_GENERATE = "READY_TO_GENERATE"
READY_TO_UPDATE = "READY_TO_UPDATE"


class Generator(Actor):
    def __init__(self, weight_buffers, trajectory_queue):
        torch.manual_seed(3)
        self.model = policy_net()  # different from the learner's until the first update
        self.weight_buffers = weight_buffers
        self.trajectory_queue = trajectory_queue
        self.state = READY_TO_GENERATE
        self.cond = asyncio.Condition()
        self.policy_version = 0

    @concurrent_endpoint
    async def generate(self, state: torch.Tensor) -> int:
        async with self.cond:
            await self.cond.wait_for(lambda: self.state == READY_TO_GENERATE)
            with torch.no_grad():
                dist = Categorical(logits=self.model(state.unsqueeze(0).repeat(G, 1)))
                actions = dist.sample()
                logps = dist.log_prob(actions)
            item = TrajectorySlice(self.policy_version, state, actions, logps, torch.zeros(G))
        await self.trajectory_queue.put.call(item)
        async with self.cond:
            self.state = READY_TO_UPDATE
            self.cond.notify_all()
        return self.policy_version

    @concurrent_endpoint
    async def update(self, version: int) -> None:
        async with self.cond:
            sd = self.model.state_dict()
            for name, (_, buffer) in self.weight_buffers.items():
                await buffer.read_into(sd[name].view(torch.uint8).flatten())
            self.model.load_state_dict(sd)
            self.policy_version = version
            self.state = READY_TO_GENERATE
            self.cond.notify_all()

    @endpoint
    async def weights_checksum(self) -> tuple:
        return self.policy_version, checksum(self.model)


async def main():
    torch.manual_seed(0)
    random.seed(0)
    learner_mesh = this_host().spawn_procs(per_host={"gpus": 1})
    gen_mesh = this_host().spawn_procs(per_host={"gpus": 2})

    traj_q = learner_mesh.spawn("traj", TrajectoryQueue)
    replay_buf = learner_mesh.spawn("rb", ReplayBuffer)
    learner = learner_mesh.spawn("learner", Learner, replay_buf)
    scorer = learner_mesh.spawn("scorer", Scorer, traj_q, replay_buf)

    wb = await learner.weights_handle.call_one()
    assert all(isinstance(buffer, RDMABuffer) for _, buffer in wb.values())
    generators = gen_mesh.spawn("generator", Generator, wb, traj_q)
    await learner.init_generators.call(generators)

    before = await generators.weights_checksum.call()
    _, learner_sum = await learner.weights_checksum.call_one()
    assert all(s != learner_sum for _, s in before.values()), "generators start different"

    await generators.generate.call(torch.randn(STATE_DIM))
    scorer_run_future = scorer.run.call_one()

    losses = []
    for step in range(STEPS):
        state = torch.randn(STATE_DIM)
        versions, loss = await asyncio.gather(
            generators.generate.call(state),
            learner.step.call_one(),
        )
        assert versions.values() == [step, step], versions  # updated by this step
        losses.append(float(loss))
        print(f"[Step {step:02d}] loss={loss:.3f}")
    assert all(math.isfinite(x) for x in losses), losses

    print("Stopping scorer...")
    await scorer.stop_scoring.call_one()
    scored = await scorer_run_future
    print(f"scorer scored {scored} trajectory slices")
    assert scored >= 2 * STEPS, scored

    version, learner_sum = await learner.weights_checksum.call_one()
    assert version == STEPS
    await generators.update.call(version)
    after = await generators.weights_checksum.call()
    print(f"learner v{version} checksum {learner_sum:.6f}; generators {after.values()}")
    assert after.values() == [(version, learner_sum)] * 2, after
    print("Training complete")


if __name__ == "__main__":
    asyncio.run(main())
