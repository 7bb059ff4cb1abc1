"""REINFORCE on CartPole with one agent and several observers, over actormesh.rpc.

The first program of the RPC seed, completed: the agent (rank 0) owns the policy; each
observer (ranks 1..N) owns a CartPole environment. For every step an observer asks the
agent for an action (``rpc_sync`` through an ``RRef`` to the agent) and reports the
reward; after each episode the agent updates the policy with REINFORCE. The running
reward rises as the policy learns to balance the pole.

Only the imports differ from a torch.distributed.rpc program.

Run it with ``python examples/rpc_reinforce.py [--episodes N] [--observers N]``; a few
hundred episodes (``--episodes 300``) solve CartPole (running reward above 475).
"""

from __future__ import annotations

import argparse
import os
import socket

import gymnasium as gym
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn, optim
from torch.distributions import Categorical

from actormesh import rpc

AGENT_NAME = "agent"
OBSERVER_NAME = "observer{}"
GAMMA = 0.99


def _call_method(method, rref, *args, **kwargs):
    """Run ``method`` on the object behind ``rref``, on its owner."""
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    return rpc.rpc_sync(rref.owner(), _call_method, args=[method, rref, *args], kwargs=kwargs)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


class Observer:
    """Lives on an observer process; plays episodes, asking the agent for each action."""

    def __init__(self, seed):
        self.id = rpc.get_worker_info().id
        self.env = gym.make("CartPole-v1")
        self.seed = seed

    def run_episode(self, agent_rref, n_steps):
        state, _ = self.env.reset(seed=self.seed)
        self.seed += 1000
        for _ in range(n_steps):
            action = _remote_method(Agent.select_action, agent_rref, self.id, state)
            state, reward, terminated, truncated, _ = self.env.step(action)
            _remote_method(Agent.report_reward, agent_rref, self.id, reward)
            if terminated or truncated:
                break


class Agent:
    """Lives on the agent process: the policy, and what each observer saw this episode."""

    def __init__(self, world_size, lr):
        self.ob_rrefs = []
        self.agent_rref = rpc.RRef(self)
        self.rewards = {}
        self.saved_log_probs = {}
        self.policy = Policy()
        self.optimizer = optim.Adam(self.policy.parameters(), lr=lr)
        self.eps = torch.finfo(torch.float32).eps
        self.running_reward = 0.0
        for ob_rank in range(1, world_size):
            ob_info = rpc.get_worker_info(OBSERVER_NAME.format(ob_rank))
            self.ob_rrefs.append(rpc.remote(ob_info, Observer, args=(ob_rank,)))
            self.rewards[ob_info.id] = []
            self.saved_log_probs[ob_info.id] = []

    def select_action(self, ob_id, state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = self.policy(state)
        m = Categorical(probs)
        action = m.sample()
        self.saved_log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    def report_reward(self, ob_id, reward):
        self.rewards[ob_id].append(reward)

    def run_episode(self, n_steps):
        """Every observer plays one episode, all at once."""
        futures = [
            ob_rref.rpc_async().run_episode(self.agent_rref, n_steps) for ob_rref in self.ob_rrefs
        ]
        for future in futures:
            future.wait()

    def finish_episode(self):
        """One REINFORCE update from the episodes just played; returns the running reward."""
        losses = []
        for ob_id, rewards in self.rewards.items():
            returns, discounted = [], 0.0
            for reward in reversed(rewards):
                discounted = reward + GAMMA * discounted
                returns.insert(0, discounted)
            returns = torch.tensor(returns)
            returns = (returns - returns.mean()) / (returns.std() + self.eps)
            for log_prob, ret in zip(self.saved_log_probs[ob_id], returns):
                losses.append(-log_prob * ret)
        # The worst observer's episode drives the running reward, as in torch's tutorial.
        episode_reward = min(sum(rewards) for rewards in self.rewards.values())
        self.running_reward = 0.05 * episode_reward + 0.95 * self.running_reward
        self.optimizer.zero_grad()
        torch.cat(losses).sum().backward()
        self.optimizer.step()
        for ob_id in self.rewards:
            self.rewards[ob_id] = []
            self.saved_log_probs[ob_id] = []
        return episode_reward, self.running_reward


def run_worker(rank, world_size, port, episodes, n_steps, lr):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.manual_seed(rank)
    if rank == 0:
        rpc.init_rpc(AGENT_NAME, rank=rank, world_size=world_size)
        agent = Agent(world_size, lr)
        threshold = gym.spec("CartPole-v1").reward_threshold
        agent.running_reward = 10.0
        for episode in range(1, episodes + 1):
            agent.run_episode(n_steps=n_steps)
            last, running = agent.finish_episode()
            if episode % 10 == 0:
                print(
                    f"episode {episode}: last reward {last:.0f}, running reward {running:.1f}",
                    flush=True,
                )
            if running > threshold:
                print(f"solved after {episode} episodes: running reward {running:.1f}")
                break
    else:
        rpc.init_rpc(OBSERVER_NAME.format(rank), rank=rank, world_size=world_size)
        # Observers only answer the agent; shutdown waits until it is done.
    rpc.shutdown()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--observers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=500, help="most steps per episode")
    parser.add_argument("--lr", type=float, default=3e-2, help="the policy's learning rate")
    args = parser.parse_args()
    world_size = args.observers + 1
    mp.spawn(
        run_worker,
        args=(world_size, free_port(), args.episodes, args.steps, args.lr),
        nprocs=world_size,
        join=True,
    )


if __name__ == "__main__":
    main()
