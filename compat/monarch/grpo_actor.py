"""Conformance program modelled on Monarch's docs example ``grpo_actor.py`` (an online
RL loop built from actors), with a toy problem of its own: a contextual bandit.

A context is a vector of 6 numbers and there are 3 arms. Two ``Sampler`` actors hold a
copy of the policy; for a context each draws a group of 5 arms and pushes the episode
into an ``Inbox`` (an ``asyncio.Queue``). A ``Judge`` pops episodes, pays each arm by
its distance from the arm a hidden linear rule prefers, and adds them to a ``Pool``
(guarded by an ``asyncio.Condition``). A ``Trainer`` takes the newest episodes from the
pool, makes a clipped, group-relative policy-gradient step, and has the samplers pull
its parameters through ``RDMABuffer`` handles it exported once.

The Monarch API this exercises, as the docs example does:

- ``async`` endpoints throughout; an ``asyncio.run(main())`` driver; two process meshes
  from ``this_host().spawn_procs``;
- ActorMeshes passed to constructors (``Judge``, ``Trainer``, ``Sampler``) and to an
  endpoint (``Trainer.connect``);
- a dict of ``RDMABuffer`` returned from an endpoint, passed to the samplers'
  constructor, and read with ``await handle.read_into(...)`` to sync the weights;
- ``Judge.serve`` started with ``call_one`` and awaited only at the end;
- ``asyncio.gather`` of a ``call`` to the sampler mesh and a ``call_one`` to the trainer;
- ``@concurrent_endpoint`` for every endpoint that waits for another message
  (``Inbox.pop``, ``Pool.newest``, ``Judge.serve``, ``Sampler.rollout``,
  ``Sampler.refresh``): Monarch 0.7 handles one ordinary message at a time per actor,
  so a sampler waiting inside ``rollout`` for a refresh would otherwise never get it.
  (For the same reason the stop endpoint is not called ``stop``: that name clashes with
  ``ActorMesh.stop`` on 0.7.)

The checks: every rollout reports the policy version it used, each step's loss is
finite, the judge scores every episode exactly once, the pool holds the expected
versions, the samplers start with parameters unlike the trainer's, and after the last
refresh their parameters are byte-for-byte the trainer's.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from dataclasses import dataclass

import torch
from monarch.actor import Actor, concurrent_endpoint, current_rank, endpoint, this_host
from monarch.rdma import RDMABuffer
from torch import nn
from torch.distributions import Categorical

CONTEXT_DIM = 6
ARMS = 3
GROUP = 5  # arms drawn per context
ROUNDS = 4  # training steps
DRAW = 3  # episodes per training step
SAMPLERS = 2


def build_policy() -> nn.Module:
    return nn.Sequential(nn.Linear(CONTEXT_DIM, 12), nn.ReLU(), nn.Linear(12, ARMS))


def digest(module: nn.Module) -> str:
    """A hash of every parameter's bytes, in registration order."""
    h = hashlib.sha256()
    for name, p in module.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The tensor's own memory as a flat uint8 tensor (no copy)."""
    return t.data.view(torch.uint8).reshape(-1)


@dataclass
class Episode:
    version: int  # policy version of the sampler that drew it
    context: torch.Tensor  # [CONTEXT_DIM]
    arms: torch.Tensor  # [GROUP], int64
    logp: torch.Tensor  # [GROUP], log-probabilities when drawn
    payoff: torch.Tensor | None = None  # [GROUP], set by the Judge


class Inbox(Actor):
    """Episodes waiting to be judged, first in first out."""

    def __init__(self):
        self._waiting: asyncio.Queue = asyncio.Queue()

    @endpoint
    async def push(self, episode: Episode | None) -> None:
        await self._waiting.put(episode)

    @concurrent_endpoint
    async def pop(self) -> Episode | None:
        return await self._waiting.get()


class Pool(Actor):
    """Judged episodes; readers block until enough have arrived."""

    def __init__(self):
        self._episodes: list[Episode] = []
        self._grew = asyncio.Condition()

    @endpoint
    async def add(self, episode: Episode) -> None:
        async with self._grew:
            self._episodes.append(episode)
            self._grew.notify_all()

    @concurrent_endpoint
    async def newest(self, n: int) -> list[Episode]:
        async with self._grew:
            enough = self._grew.wait_for(lambda: len(self._episodes) >= n)
            await asyncio.wait_for(enough, timeout=30)
            return self._episodes[-n:]

    @endpoint
    async def versions(self) -> list[int]:
        return [e.version for e in self._episodes]


class Judge(Actor):
    """Pays each arm 1, 0.5 or 0 by its distance from the arm a hidden rule prefers."""

    def __init__(self, inbox, pool):
        self.inbox = inbox
        self.pool = pool
        self.rule = torch.randn(CONTEXT_DIM, ARMS, generator=torch.Generator().manual_seed(7))
        self.judged = 0

    def _pay(self, context: torch.Tensor, arms: torch.Tensor) -> torch.Tensor:
        favourite = int(torch.argmax(context @ self.rule))
        return 1.0 - 0.5 * (arms - favourite).abs().float()

    @concurrent_endpoint
    async def serve(self) -> int:
        # Runs until ``finish`` pushes the ``None`` marker through the inbox.
        while (episode := await self.inbox.pop.call_one()) is not None:
            episode.payoff = self._pay(episode.context, episode.arms)
            await self.pool.add.call(episode)
            self.judged += 1
        return self.judged

    @endpoint
    async def finish(self) -> None:
        await self.inbox.push.call(None)


class Trainer(Actor):
    def __init__(self, pool):
        torch.manual_seed(11)
        self.policy = build_policy()
        self.opt = torch.optim.SGD(self.policy.parameters(), lr=0.05, momentum=0.9)
        self.pool = pool
        self.samplers = None
        self.version = 0
        self.clip = 0.25
        self.entropy_weight = 0.01
        self.exported: dict[str, RDMABuffer] = {}

    @endpoint
    async def export_weights(self) -> dict:
        # Registered in place: the optimiser updates this very memory, so the handles
        # always expose the current parameters.
        self.exported = {
            name: RDMABuffer(byte_view(p)) for name, p in self.policy.named_parameters()
        }
        return self.exported

    @endpoint
    async def connect(self, samplers) -> None:
        self.samplers = samplers

    @endpoint
    async def fingerprint(self) -> tuple[int, str]:
        return self.version, digest(self.policy)

    @endpoint
    async def train_step(self) -> dict:
        if self.samplers is not None:
            await self.samplers.refresh.call(self.version)
        batch = await self.pool.newest.call_one(DRAW)
        contexts = torch.stack([e.context for e in batch])  # [DRAW, CONTEXT_DIM]
        arms = torch.stack([e.arms for e in batch])  # [DRAW, GROUP]
        drawn_logp = torch.stack([e.logp for e in batch])
        payoff = torch.stack([e.payoff for e in batch])
        # Each arm is compared with the rest of its own group.
        spread = payoff.std(dim=1, keepdim=True) + 1e-6
        advantage = (payoff - payoff.mean(dim=1, keepdim=True)) / spread

        logits = self.policy(contexts).unsqueeze(1).expand(-1, GROUP, -1)
        current = Categorical(logits=logits)
        ratio = torch.exp(current.log_prob(arms) - drawn_logp)
        bounded = ratio.clamp(1.0 - self.clip, 1.0 + self.clip)
        gain = torch.minimum(ratio * advantage, bounded * advantage).mean()
        loss = -(gain + self.entropy_weight * current.entropy().mean())

        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.version += 1
        return {"loss": loss.item(), "payoff": payoff.mean().item(), "version": self.version}


class Sampler(Actor):
    def __init__(self, handles, inbox):
        torch.manual_seed(100 + current_rank().rank)  # unlike the trainer's until synced
        self.policy = build_policy()
        self.handles = handles
        self.inbox = inbox
        self.version = 0
        self.used = False  # drew with the current weights; wait for a refresh
        self.turn = asyncio.Condition()

    @concurrent_endpoint
    async def rollout(self, context: torch.Tensor) -> int:
        async with self.turn:
            await self.turn.wait_for(lambda: not self.used)
            with torch.no_grad():
                choice = Categorical(logits=self.policy(context))
                arms = choice.sample((GROUP,))
                episode = Episode(self.version, context, arms, choice.log_prob(arms))
            self.used = True
        await self.inbox.push.call(episode)
        return episode.version

    @concurrent_endpoint
    async def refresh(self, version: int) -> None:
        async with self.turn:
            mine = dict(self.policy.named_parameters())
            for name, handle in self.handles.items():
                await handle.read_into(byte_view(mine[name]))
            self.version = version
            self.used = False
            self.turn.notify_all()

    @endpoint
    async def fingerprint(self) -> tuple[int, str]:
        return self.version, digest(self.policy)


async def main() -> None:
    torch.manual_seed(0)
    hub = this_host().spawn_procs(per_host={"hub": 1})
    farm = this_host().spawn_procs(per_host={"sampler": SAMPLERS})

    inbox = hub.spawn("inbox", Inbox)
    pool = hub.spawn("pool", Pool)
    trainer = hub.spawn("trainer", Trainer, pool)
    judge = hub.spawn("judge", Judge, inbox, pool)

    handles = await trainer.export_weights.call_one()
    assert set(handles) == {"0.weight", "0.bias", "2.weight", "2.bias"}, set(handles)
    assert all(isinstance(h, RDMABuffer) for h in handles.values())
    samplers = farm.spawn("sampler", Sampler, handles, inbox)
    await trainer.connect.call(samplers)

    _, initial = await trainer.fingerprint.call_one()
    unsynced = await samplers.fingerprint.call()
    assert all(fp != initial for _, fp in unsynced.values()), "samplers should start apart"

    contexts = torch.randn(ROUNDS + 1, CONTEXT_DIM)
    opening = await samplers.rollout.call(contexts[0])
    assert opening.values() == [0] * SAMPLERS, opening
    judging = judge.serve.call_one()  # left running; awaited after the loop

    for k in range(ROUNDS):
        used, stats = await asyncio.gather(
            samplers.rollout.call(contexts[k + 1]),
            trainer.train_step.call_one(),
        )
        # The step refreshed the samplers to version k before they could draw again.
        assert used.values() == [k] * SAMPLERS, (k, used)
        assert stats["version"] == k + 1 and math.isfinite(stats["loss"]), stats
        print(f"round {k}: loss {stats['loss']:+.4f}, mean payoff {stats['payoff']:.3f}")

    await judge.finish.call_one()
    judged = await judging
    episodes = SAMPLERS * (ROUNDS + 1)
    print(f"judge scored {judged} episodes")
    assert judged == episodes, judged
    seen = sorted(await pool.versions.call_one())
    assert seen == sorted([0] * SAMPLERS + [k for k in range(ROUNDS) for _ in range(SAMPLERS)])

    version, trained = await trainer.fingerprint.call_one()
    assert version == ROUNDS and trained != initial
    await samplers.refresh.call(version)
    synced = await samplers.fingerprint.call()
    assert synced.values() == [(ROUNDS, trained)] * SAMPLERS, synced
    print(f"samplers hold trainer version {version}, digest {trained[:12]}")


if __name__ == "__main__":
    asyncio.run(main())
