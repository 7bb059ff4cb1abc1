"""The simulated hosts of ``bench.simulate``: how their runtimes reach each other (the
seam a tree of agents would use), in this process, with no socket."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import pytest

from actormesh import ActorDiedError, Config
from actormesh._core import headers
from bench.sim_hosts import Dialing, LoopThread, SimAgentRuntime

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def agents() -> Iterator[tuple[SimAgentRuntime, SimAgentRuntime, Dialing]]:
    thread = LoopThread("sim-agents-test")
    dialing = Dialing()
    config = Config(event_log=False, output="off", progress="never")
    made = [SimAgentRuntime(config, thread.loop, f"t{i}", i, dialing) for i in (1, 2)]
    for runtime in made:
        dialing.agents[runtime.address] = runtime
    yield made[0], made[1], dialing
    thread.stop()


def test_a_simulated_agent_dials_another_by_its_address(agents: Any) -> None:
    first, second, _ = agents
    got: queue.Queue[tuple[Any, ...]] = queue.Queue()
    second.frame_kinds[headers.EVENT] = lambda conn, header, parts: got.put(header)
    link = first.connection(second.address)
    assert first.connection(second.address) is link  # one link per peer, as with sockets
    link.send([headers.encode(headers.Event("output", "x")), b""])
    assert got.get(timeout=10) == (headers.EVENT, "output", "x")


def test_an_address_of_the_simulation_nobody_has_fails_at_once(agents: Any) -> None:
    first, _, _ = agents
    with pytest.raises(ActorDiedError, match="nothing listens there"):
        first.connection("tcp://10.9.9.9:1")
