"""Calls made as an interior agent's death is handled must go around it and answer:

- ``during``: one made while the controller fails the calls that were under way through
  the dead agent (the tree routes around it by then), not failed with them: at 1,024
  simulated hosts that failing takes long enough for a program to call again meanwhile;
- ``after``: one made by a program as soon as a call to the dead agent's own host failed
  (the tree must route around it before anyone hears of its death);
- ``registered``: the same call, with the controller failing what went through the dead
  agent just after the call's request is registered, before its frames leave: the
  request must say by then that it is routed after the death (at 1,024 simulated hosts,
  making a slice's frames takes long enough for this to happen);
- ``adopter``: host 4's agent dies, and host 0's, asked to adopt host 4's children
  (20..23), dies as it is asked: they must be adopted again higher up (by the
  controller) and answer, not be given up;
- ``unadopted``: host 4's agent dies and nothing adopts its children (the controller
  gone, say): each ends by itself within twice its heartbeat timeout, with its workers.

Run by ``test_simulate.py`` in a process of its own (the simulation replaces the
process' runtime), with the case as its argument; prints one JSON line."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

os.environ.update(ACTORMESH_OUTPUT="off", ACTORMESH_EVENT_LOG="0", ACTORMESH_PROGRESS="never")

from actormesh import Actor, ActorDiedError, endpoint, host_mesh
from actormesh._hosts._routed import as_routed
from actormesh.testing import wait_until
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
    if sys.argv[1] == "unadopted":  # (the agents' own timeout: their orphans' window)
        sim._config = sim._config.replace(heartbeat_timeout=0.5)
    hosts = host_mesh(HOSTS, allocator=sim, fan_out=FAN_OUT).get(timeout=120)
    mesh = hosts.spawn_procs(per_host={"gpus": 2}).spawn("echo", Echo)
    assert len(mesh.echo.call(0).get(timeout=120)) == 2 * HOSTS
    below = mesh.slice(hosts=slice(4, 8))  # under host 0
    host = sim.host_of(hosts._hosts.links[0])
    outcome: dict[str, Any] = {}
    try:
        if sys.argv[1] == "during":
            outcome["answered"] = _call_during(runtime, host, below)
        elif sys.argv[1] == "unadopted":
            outcome["ended"] = _nobody_adopts(runtime, sim, hosts)
        elif sys.argv[1] == "adopter":
            outcome["answered"] = _adopter_dies(runtime, sim, hosts, mesh)
        elif sys.argv[1] == "registered":
            outcome.update(_call_registered(runtime, hosts._hosts.links[0], host, mesh, below))
        else:
            outcome.update(_call_after(hosts._hosts.links[0], host, mesh, below))
    except Exception as error:
        outcome["error"] = f"{type(error).__name__}: {error}"[:500]
    print(json.dumps(outcome), flush=True)
    os._exit(0)  # (the simulated agents' thread is not joined)


def _call_after(link: Any, host: Any, mesh: Any, below: Any) -> dict[str, Any]:
    # The loop is held until the program has sent its next call: whatever the controller
    # still had to do about the death must be done by then.
    return _below_once_own_failed(link, host, mesh, below, threading.Event())


def _call_registered(runtime: Any, link: Any, host: Any, mesh: Any, below: Any) -> dict[str, Any]:
    registered, handled, armed = threading.Event(), threading.Event(), threading.Event()
    tree_agent_lost = runtime.host_agents._tree_agent_lost

    def then_release(*args: Any) -> None:
        tree_agent_lost(*args)  # (fails the requests routed through the dead agent)
        handled.set()

    register = runtime.register

    def register_then_wait(handler: Any) -> int:
        req_id: int = register(handler)
        if armed.is_set() and threading.current_thread() is threading.main_thread():
            armed.clear()
            registered.set()  # (the loop goes on with the death)
            handled.wait(30)  # its frames leave only after the loop failed the others
        return req_id

    runtime.host_agents._tree_agent_lost = then_release
    runtime.register = register_then_wait
    return _below_once_own_failed(link, host, mesh, below, registered, armed.set)


def _below_once_own_failed(
    link: Any, host: Any, mesh: Any, below: Any, hold: threading.Event, arm: Any = None
) -> dict[str, Any]:
    """Kill host 0's agent while a call to its own host waits; once that call failed,
    call the hosts below it from here. The loop, right after failing host 0's own ranks,
    waits for ``hold`` (set once the call below is sent, if not before) before it handles
    the rest of the death; ``arm`` is called just before the call below."""
    lost = type(link).lost

    def lost_then_hold(self: Any, how: str) -> None:
        lost(self, how)  # (fails its host's own ranks: the program below wakes)
        if self is link:
            hold.wait(30)

    type(link).lost = lost_then_hold
    host.freeze()  # (its own call below waits until it dies)
    own = mesh.slice(hosts=0).echo.call(1)
    host.die()
    outcome: dict[str, Any] = {}
    try:
        own.get(timeout=60)
    except ActorDiedError:
        outcome["own_failed"] = True
    if arm is not None:
        arm()
    after = below.echo.call(5)  # (sent from here, now)
    hold.set()
    outcome["answered"] = list(after.get(timeout=60).values())
    return outcome


def _adopter_dies(runtime: Any, sim: Any, hosts: Any, mesh: Any) -> list[Any]:
    links = hosts._hosts.links
    adopter, asked = links[0], threading.Event()
    down_tree = adopter.down_tree

    async def dying_as_asked(op: str, *args: Any) -> Any:
        if op == "adopt_tree":
            sim.host_of(adopter).die()  # (its connection closes as the request leaves)
            asked.set()
        return await down_tree(op, *args)

    adopter.down_tree = dying_as_asked
    orphans = links[20:24]
    assert all(as_routed(link.conn) for link in orphans), "they did not join below host 4"
    sim.host_of(links[4]).die()
    assert asked.wait(60), f"host 0 was never asked to adopt them (host 4: {links[4].lost_reason})"
    # Host 0's death handled, they are the controller's own (a call routed before it went
    # through host 0, and fails: tree_death_race's other cases are about those).
    wait_until(lambda: not any(as_routed(link.conn) for link in orphans), 60, "the adoption")
    below = mesh.slice(hosts=slice(20, 24))
    return list(below.echo.call(5).get(timeout=60).values())


def _nobody_adopts(runtime: Any, sim: Any, hosts: Any) -> float:
    links = hosts._hosts.links
    runtime.host_agents._orphans = lambda *args: None  # (the controller adopts nobody)
    orphans = [sim.host_of(link).runtime for link in links[20:24]]
    sim.host_of(links[4]).die()
    return wait_until(lambda: all(o.closed for o in orphans), 30, "the orphans to end")


def _call_during(runtime: Any, host: Any, below: Any) -> list[Any]:
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

    runtime.fail_connection = call_while_failing
    host.die()
    assert called.wait(60), "the agent's death was not handled"
    return list(made[0].get(timeout=60).values())


if __name__ == "__main__":
    sys.exit(main())
