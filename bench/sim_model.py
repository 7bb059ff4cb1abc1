"""The latency model of a cast on real hosts, built from the per-hop costs that
``bench.simulate`` measures (and ``bench.scale`` calibrates on real sockets).

The simulation runs the real controller and agent code but puts every agent on one
thread of one process, so its wall times are not a cluster's. What it measures well is
CPU: the controller's per cast, and the agents' per cast. The model takes those as the
costs of each hop and adds what the simulation leaves out (the network, the workers),
as docs/multihost.md ("A latency model for real hosts") explains:

- the controller's CPU per cast (less the heartbeats it answered meanwhile), fitted
  to ``fixed + per_host * H + quadratic * H**2``
  (least squares of the relative error over every size measured, no term negative),
  times ``calibration``: what the
  same cast costs on real sockets over what it costs on in-memory links, from a run of
  ``bench.scale`` and a simulation of the same shape;
- one agent's CPU per cast (the simulated agents' CPU over the hosts), times the same
  calibration;
- ``rtt_us``: a network round trip per hop; ``worker_us``: the endpoint's own time.

One level (today): the controller is the bottleneck and its sending and its reading of
the replies share one interpreter lock, so ``T1(H) = C(H) + rtt + agent + worker``.
A tree of fan-out ``k`` (``d = ceil(log_k H)`` levels of agents): the controller pays
``C(k)``, every level one round trip and one interior agent's relay of ``k`` children,
assumed to cost what the controller pays per host, so
``Tk(H) = C(k) + d * (rtt + per_host * k) + agent + worker``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["HopCosts", "fit", "one_level_us", "tree_us"]


@dataclass(frozen=True)
class HopCosts:
    """Per-hop costs, in microseconds of CPU (see the module docstring)."""

    fixed_us: float
    per_host_us: float
    quadratic_us: float
    agent_us: float
    calibration: float = 1.0
    rtt_us: float = 100.0
    worker_us: float = 50.0

    def controller_us(self, hosts: int) -> float:
        """The controller's CPU for one cast to ``hosts`` agents, on real sockets."""
        simulated = self.fixed_us + self.per_host_us * hosts + self.quadratic_us * hosts**2
        return simulated * self.calibration

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def fit(
    sizes: list[dict[str, Any]],
    calibration: float = 1.0,
    rtt_us: float = 100.0,
    worker_us: float = 50.0,
) -> HopCosts | None:
    """The costs from ``bench.simulate``'s sizes (at least two that finished)."""
    ok = sorted((s for s in sizes if "error" not in s), key=lambda s: s["hosts"])
    if len(ok) < 2:
        return None
    if len(ok) == 2:
        small, large = ok
        per_host = (large["cast_cpu_net_us"] - small["cast_cpu_net_us"]) / (
            large["hosts"] - small["hosts"]
        )
        fixed, quadratic = (
            max(0.0, small["cast_cpu_net_us"] - per_host * small["hosts"]),
            0.0,
        )
    else:
        fixed, per_host, quadratic = _least_squares(
            [float(s["hosts"]) for s in ok], [s["cast_cpu_net_us"] for s in ok]
        )
    agent = statistics_median([s["cast_cpu_agents_us"] / s["hosts"] for s in ok])
    return HopCosts(fixed, per_host, quadratic, agent, calibration, rtt_us, worker_us)


def _least_squares(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """``a, b, c`` (none negative) of ``y = a + b x + c x^2`` that minimise the squared
    relative errors: each size counts alike, whatever its cost."""
    for terms in ((0, 1, 2), (1, 2), (1,)):
        rows = [[x**t / y for t in terms] for x, y in zip(xs, ys, strict=True)]
        normal = [
            [sum(r[i] * r[j] for r in rows) for j in range(len(terms))] for i in range(len(terms))
        ]
        right = [sum(r[i] for r in rows) for i in range(len(terms))]
        solved = _solve(normal, right)
        if all(v >= 0 for v in solved):
            found = dict(zip(terms, solved, strict=True))
            return found.get(0, 0.0), found.get(1, 0.0), found.get(2, 0.0)
    return 0.0, 0.0, 0.0


def _solve(matrix: list[list[float]], right: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a few unknowns)."""
    n = len(right)
    rows = [[*matrix[i], right[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[col][col]:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] / rows[i][i] if rows[i][i] else 0.0 for i in range(n)]


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def one_level_us(costs: HopCosts, hosts: int) -> float:
    """Call + gather latency through one level of agents on real hosts (model)."""
    agent = costs.agent_us * costs.calibration
    return costs.controller_us(hosts) + costs.rtt_us + agent + costs.worker_us


def tree_us(costs: HopCosts, hosts: int, fan_out: int, quadratic: bool = True) -> float:
    """Call + gather latency through a tree of agents of ``fan_out`` on real hosts
    (model); ``quadratic=False`` leaves out today's square term of the controller."""
    top = min(fan_out, hosts)
    depth = max(1, math.ceil(math.log(hosts, fan_out) - 1e-9)) if hosts > 1 else 1
    controller = costs.controller_us(top)
    if not quadratic:
        controller -= costs.quadratic_us * top**2 * costs.calibration
    relay = costs.per_host_us * costs.calibration * min(fan_out, hosts)
    agent = costs.agent_us * costs.calibration
    interior = (depth - 1) * (costs.rtt_us + relay)
    return controller + costs.rtt_us + interior + agent + costs.worker_us
