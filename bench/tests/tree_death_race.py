"""A call made while the controller fails the calls that were under way through an
interior agent that died (the tree routes around it by then) must go around it and
answer, not fail with the others: at 1,024 simulated hosts that failing takes long
enough for a program to call again meanwhile. Run by ``test_simulate.py`` in a process
of its own (the simulation replaces the process' runtime); prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

os.environ.update(ACTORMESH_OUTPUT="off", ACTORMESH_EVENT_LOG="0", ACTORMESH_PROGRESS="never")

from actormesh import Actor, endpoint, host_mesh
from bench.sim_hosts import LoopThread, SimControllerRuntime, SimulatedHosts

HOSTS, FAN_OUT = 24, 4  # host 0 relays to hosts 4..7, which relay to 20..23


class Echo(Actor):
    @endpoint
    def echo(self, value: int) -> int:
        return value


def main() -> None:
    runtime = SimControllerRuntime.get()
    agents = LoopThread("sim-agents")
    sim = SimulatedHosts(agents.loop)
    runtime.dialing = sim.dialing
    hosts = host_mesh(HOSTS, allocator=sim, fan_out=FAN_OUT).get(timeout=120)
    mesh = hosts.spawn_procs(per_host={"gpus": 2}).spawn("echo", Echo)
    assert len(mesh.echo.call(0).get(timeout=120)) == 2 * HOSTS
    below = mesh.slice(hosts=slice(4, 8))  # under host 0
    made: list[Any] = []
    called = threading.Event()
    fail_connection = runtime.fail_connection

    def call_while_failing(conn: Any, reason: str, routed_before: int | None = None) -> None:
        if "which relays to this host" in reason and not made:
            # On the loop thread, in the middle of failing what went through the dead
            # agent: a call now is routed around it.
            made.append(below.echo.call(5))
            called.set()
        fail_connection(conn, reason, routed_before)

    runtime.fail_connection = call_while_failing  # type: ignore[method-assign]
    sim.host_of(hosts._hosts.links[0]).die()
    outcome: dict[str, Any] = {}
    try:
        assert called.wait(60), "the agent's death was not handled"
        outcome["answered"] = list(made[0].get(timeout=60).values())
    except Exception as error:
        outcome["error"] = f"{type(error).__name__}: {error}"[:500]
    print(json.dumps(outcome), flush=True)
    os._exit(0)  # (the simulated agents' thread is not joined)


if __name__ == "__main__":
    sys.exit(main())
