"""A tree of host agents on real network namespaces: eight hosts with fan-out 2.

The controller (this test process) reaches positions 0 and 1; 0 relays to 2 and 3, 1 to
4 and 5, 2 to 6 and 7 (``actormesh._hosts._tree``): three levels of agents. Calls,
slices, reductions, ordering, output, restarts and direct actor-to-actor calls go
through it; an interior agent killed or cut off in the middle of a stream of casts
fails only what it must, naming its host, and the rest of the tree answers the next
cast. ``ACTORMESH_TREE_HOSTS`` and ``ACTORMESH_TREE_FAN_OUT`` make the tree larger (the
slow run: 32 hosts, fan-out 4).
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multihost_actors import Where
from multihost_support import HERE, Network, ip, namespaces_or_skip

from actormesh import (
    ActorDiedError,
    ActorError,
    ActorMesh,
    CallTimeoutError,
    HostMesh,
    host_mesh,
)
from actormesh._api._planned import by_plan
from actormesh._core import headers
from actormesh._hosts import Plan, Runtime, _tree
from actormesh._hosts._routed import as_routed
from actormesh.actor import BootstrapCommand, default_bootstrap_cmd
from actormesh.allocators import ExternalAllocator
from actormesh.testing import wait_until

pytestmark = pytest.mark.timeout(240)

HOSTS = int(os.environ.get("ACTORMESH_TREE_HOSTS", "8"))
FAN_OUT = int(os.environ.get("ACTORMESH_TREE_FAN_OUT", "2"))
# An interior agent: position 0 relays to 1..k-1's neighbours' subtrees' first level.
VICTIM = 0
# Heartbeats for the cut-link tests: short, but not so short that a healthy agent of a
# large tree on a loaded machine misses them (the slow run has four times the hosts).
BEAT = {
    "ACTORMESH_HEARTBEAT_TIMEOUT": "2" if HOSTS <= 8 else "6",
    "ACTORMESH_HEARTBEAT_INTERVAL": "0.5",
}


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    yield from namespaces_or_skip(HOSTS)


def _tree_on(network: Network) -> tuple[HostMesh, list[subprocess.Popen[str]]]:
    allocator = ExternalAllocator(f"{network.controller_ip}:0", timeout=60)
    address = allocator.listen().removeprefix("tcp://")
    assert allocator.secret is not None
    future = host_mesh(HOSTS, allocator=allocator, fan_out=FAN_OUT)
    agents = [network.start_agent(host, address, allocator.secret) for host in network.hosts]
    return future.get(timeout=90), agents


@pytest.fixture(scope="module")
def hosts(network: Network) -> Iterator[HostMesh]:
    mesh, agents = _tree_on(network)
    try:
        yield mesh
    finally:
        mesh.shutdown().get(timeout=60)
        assert [agent.wait(timeout=15) for agent in agents] == [0] * HOSTS


@pytest.fixture(scope="module")
def where(hosts: HostMesh) -> Iterator[ActorMesh[Where]]:
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    try:
        yield procs.spawn("where", Where)
    finally:
        procs.stop().get(timeout=60)


_CAST_KINDS = (
    headers.CAST,
    headers.RELAY,
    headers.TREE_CAST,
    headers.ROUTE,
    headers.CAST_PLAN,
    headers.PLANNED_CAST,
)


def _sent_by_controller(
    action: Any, kinds: tuple[int, ...] = _CAST_KINDS
) -> list[tuple[str, tuple[Any, ...]]]:
    """The frames of ``kinds`` (casts and relays unless said) the controller sends its
    agents while ``action`` runs: ``(agent address, header)`` each."""
    runtime = Runtime.get()
    sent: list[tuple[str, tuple[Any, ...]]] = []
    originals = {}
    for conn, link in runtime.agents.items():
        originals[conn] = conn.send

        def counting(parts: Any, share: Any = None, _l: Any = link, _s: Any = conn.send) -> None:
            header = headers.decode(parts[0])
            if header[0] in kinds:
                sent.append((_l.address, header))
            _s(parts) if share is None else _s(parts, share)

        conn.send = counting  # type: ignore[method-assign]
    try:
        action()
    finally:
        for conn, send in originals.items():
            conn.send = send  # type: ignore[method-assign]
    return sent


def test_a_cast_leaves_the_controller_as_fan_out_frames(
    network: Network, where: ActorMesh[Where]
) -> None:
    def cast() -> None:
        assert len(where.where.call().get(timeout=30)) == 2 * HOSTS
        where.where.broadcast()

    sent = _sent_by_controller(cast)
    casts = [(address, header) for address, header in sent if header[0] != headers.CAST_PLAN]
    plans = [header for _, header in sent if header[0] == headers.CAST_PLAN]
    # The whole mesh goes by its plan: one frame per child of the controller per cast,
    # and the plan itself at most once to each (it is taught on the mesh's first call).
    assert len(casts) == 2 * FAN_OUT
    assert {kind for _, (kind, *_) in casts} == {headers.PLANNED_CAST}
    assert {address for address, _ in sent} == {h.ip for h in network.hosts[:FAN_OUT]}
    assert len(plans) <= FAN_OUT
    sent_again = _sent_by_controller(cast)
    assert [header[0] for _, header in sent_again] == [headers.PLANNED_CAST] * (2 * FAN_OUT)
    # A planned cast names no rank: its frames are as small at 10,000 hosts as here.
    for _, header in sent_again:
        assert len(headers.encode(headers.read(headers.PlannedCast, header))) < 200


def test_a_call_by_plan_counts_every_rank_and_a_timeout_names_the_late_one(
    where: ActorMesh[Where],
) -> None:
    state = where._state
    before = state.stats()
    assert list(where.rank_plus.call(1).get(timeout=30).values()) == list(range(1, 2 * HOSTS + 1))
    assert where.rank_plus.reduce(operator.add)(0).get(timeout=30) == sum(range(2 * HOSTS))
    after = state.stats()
    # Counted once for the whole mesh, reported for every rank.
    assert [after[r]["completed"] - before[r]["completed"] for r in after] == [2] * (2 * HOSTS)
    assert [after[r]["in_flight"] for r in after] == [0] * (2 * HOSTS)
    late = 2 * HOSTS - 1  # on the deepest host
    future = where.late_on.call(late, 2.0)
    assert state.in_flight([0, late]) == [1, 1]
    with pytest.raises(CallTimeoutError) as caught:
        future.get(timeout=0.5)
    # Agents send a subtree's answers up together: the ranks waiting are those under the
    # controller's child above the late host, never those of its other children.
    top = HOSTS - 1
    while top >= FAN_OUT:
        top = top // FAN_OUT - 1
    held = sorted(2 * host + gpu for host in _tree.subtree(top, HOSTS, FAN_OUT) for gpu in (0, 1))
    assert late in caught.value.pending
    assert list(caught.value.pending) == held
    # Given up (on the loop, soon): nothing is left counted in flight.
    wait_until(
        lambda: state.in_flight(list(range(2 * HOSTS))) == [0] * (2 * HOSTS), 10, "in flight"
    )
    assert list(where.rank_plus.call(0).get(timeout=30).values())[-1] == late


def test_spawn_procs_and_stop_leave_the_controller_as_one_request_per_child(
    network: Network, hosts: HostMesh
) -> None:
    name = f"whole-{os.getpid()}"
    made: list[Any] = []
    kinds = (headers.HOST, headers.SHUTDOWN, *_CAST_KINDS)
    sent = _sent_by_controller(
        lambda: made.append(hosts.spawn_procs(per_host={"gpus": 2}, name=name)), kinds
    )
    procs = made[0]
    ops = [headers.read(headers.HostOp, header).op for _, header in sent]
    assert ops == ["spawn_tree"] * FAN_OUT
    assert {address for address, _ in sent} == {h.ip for h in network.hosts[:FAN_OUT]}
    # Every host started its two, and they answer from there.
    answers = procs.spawn("w", Where).where.call().get(timeout=60)
    for index, value in enumerate(answers.values()):
        assert f"|tcp://{network.hosts[index // 2].ip}:" in str(value["address"])
    assert len(_processes_of(name)) == 2 * HOSTS
    # The stop too: the actors' STOP_MESH as one cast, then the processes' stop, one
    # request per child of the controller (no SHUTDOWN, signal or release per process).
    runtime = Runtime.get()
    on_event = runtime.frame_kinds[headers.EVENT]
    events: list[str] = []

    def hear(conn: Any, header: tuple[Any, ...], parts: Any) -> None:
        events.append(headers.read(headers.Event, header).what)
        on_event(conn, header, parts)

    runtime.frame_kinds[headers.EVENT] = hear
    try:
        sent = _sent_by_controller(lambda: procs.stop().get(timeout=60), kinds)
    finally:
        runtime.frame_kinds[headers.EVENT] = on_event
    assert "exited" not in events  # (each subtree's exits came in its one answer)
    assert {address for address, _ in sent} == {h.ip for h in network.hosts[:FAN_OUT]}
    stops = [header for _, header in sent if header[0] == headers.HOST]
    assert [headers.read(headers.HostOp, header).op for header in stops] == ["stop_tree"] * FAN_OUT
    assert {header[0] for _, header in sent} == {headers.HOST, headers.TREE_CAST}
    assert len(sent) == 2 * FAN_OUT
    assert not any(child.alive() for child in procs._processes.children)
    wait_until(lambda: not _processes_of(name), 30, "every worker of the mesh to go")


def _slow_python(tmp_path: Path, seconds: float) -> str:
    """A Python executable that takes ``seconds`` to start: a spawn through it stays in
    flight that long."""
    script = tmp_path / "slow-python"
    script.write_text(f'#!/bin/sh\nsleep {seconds}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)


def _processes_of(name: str) -> set[int]:
    """The processes of the process mesh ``name`` on any host (by their environment)."""
    tag = f"ACTORMESH_PROC_MESH={name}\0".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if tag in Path(f"/proc/{entry}/environ").read_bytes():
                    found.add(int(entry))
    return found


def test_a_host_failing_its_spawn_fails_spawn_procs_and_leaves_no_worker(
    hosts: HostMesh, tmp_path: Path
) -> None:
    # The deepest host's workers cannot start; every other host's are stopped again.
    deep = HOSTS - 1
    good = default_bootstrap_cmd()
    bad = BootstrapCommand(str(tmp_path / "no-such-python"), None, good.args, {})
    name = f"doomed-{os.getpid()}"
    with pytest.raises(ActorError, match="no-such-python"):
        hosts.spawn_procs(
            per_host={"gpus": 2},
            name=name,
            bootstrap_command=lambda point: bad if point["hosts"] == deep else good,
        )
    wait_until(lambda: not _processes_of(name), 30, "every worker of the failed spawn to go")


@pytest.mark.parametrize("victim", [VICTIM, FAN_OUT], ids=["on-top", "below-another"])
def test_an_agent_dying_during_spawn_procs_fails_it_and_leaves_no_worker(
    network: Network, tmp_path: Path, victim: int
) -> None:
    # The workers take 3 s to start; the agent of host ``victim``, which relays the spawn
    # to the hosts below it, is killed meanwhile: one the controller reaches first, or
    # one below another agent (which then answers for it). The spawn fails naming it,
    # and what did start anywhere (below it too, where the request had gone on) is
    # stopped.
    mesh, agents = _tree_on(network)
    name = f"interrupted-{os.getpid()}"
    slow = mesh.with_python_executable(_slow_python(tmp_path, 3.0))
    failed: list[BaseException] = []

    def spawn() -> None:
        try:
            slow.spawn_procs(per_host={"gpus": 1}, name=name)
        except BaseException as error:
            failed.append(error)

    spawner = threading.Thread(target=spawn)
    try:
        spawner.start()
        deepest = network.hosts[HOSTS - 1].ip  # (below either victim, with 8 hosts)
        wait_until(lambda: len(_processes_of(name)) == HOSTS, 60, "a worker starting per host")
        agents[victim].send_signal(signal.SIGKILL)
        spawner.join(timeout=90)
        assert not spawner.is_alive()
        assert len(failed) == 1 and isinstance(failed[0], ActorDiedError), failed
        # (the first host that failed is the victim's own: "... on node (ip) is gone")
        assert f"({network.hosts[victim].ip}) is gone" in str(failed[0])
        wait_until(lambda: not _processes_of(name), 30, "every worker of the failed spawn to go")
        # The rest of the tree starts workers again, below the dead agent too.
        rest = mesh.slice(hosts=slice(victim + 1, HOSTS)).spawn_procs(per_host={"gpus": 1})
        answers = rest.spawn("w", Where).where.call().get(timeout=60)
        assert f"|tcp://{deepest}:" in str(list(answers.values())[-1]["address"])
        rest.stop().get(timeout=60)
    finally:
        spawner.join(timeout=90)
        mesh.shutdown().get(timeout=60)
        for agent in agents:
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=15)


def test_a_slice_goes_only_down_the_subtrees_it_touches(
    network: Network, where: ActorMesh[Where]
) -> None:
    deepest = HOSTS - 1
    path = [deepest]
    while path[-1] >= FAN_OUT:
        path.append(path[-1] // FAN_OUT - 1)
    path.reverse()  # the positions from the controller's child down to the deepest host
    sent = _sent_by_controller(lambda: where.slice(hosts=deepest).where.call().get(timeout=30))
    assert [address for address, _ in sent] == [network.hosts[path[0]].ip]
    tree_cast = headers.read(headers.TreeCast, sent[0][1])
    assert tree_cast.targets == []  # the first agent only relays
    below = tree_cast.below
    for position in path[1:]:
        (branch,) = below  # one branch per level: nothing else is touched
        assert f"tcp://{network.hosts[position].ip}:" in branch[0]
        below = branch[2]
    assert below == []


def test_calls_and_reductions_come_back_merged_per_subtree(
    network: Network, where: ActorMesh[Where], folded: list[int]
) -> None:
    values = where.where.call().get(timeout=30).values()
    for index, value in enumerate(values):
        assert f"|tcp://{network.hosts[index // 2].ip}:" in str(value["address"])
        assert json.loads(str(value["env_coords"])) == {"hosts": index // 2, "gpus": index % 2}
    seen = folded
    total = where.rank_plus.reduce(operator.add)(10).get(timeout=30)
    assert total == sum(range(2 * HOSTS)) + 10 * 2 * HOSTS
    assert seen == [headers.PARTIAL] * FAN_OUT  # one value per child of the controller
    part = where.slice(hosts=slice(HOSTS // 2, HOSTS)).where.call().get(timeout=30)
    assert [int(v["env_rank"]) for v in part.values()] == list(range(HOSTS, 2 * HOSTS))


def test_casts_and_single_calls_to_a_deep_actor_keep_their_order(
    where: ActorMesh[Where],
) -> None:
    deep = where.slice(hosts=HOSTS - 1, gpus=1)
    for value in range(30):
        where.remember.broadcast(value)
        assert deep.recall.call_one().get(timeout=30) == value
        deep.remember.broadcast(-value)
        assert where.recall.call().get(timeout=30).values()[-1] == -value


def test_a_worker_dead_just_before_a_cast_does_not_hold_back_its_neighbours(
    hosts: HostMesh,
) -> None:
    # A worker of the deepest host dies, and its agent hears of it before a call to it
    # and its neighbour arrives, while the controller has not yet (its exit event is held
    # back here until the call has left). The agent must not wait for the dead worker's
    # reply: the neighbour's would wait with it for good (a process mesh's stop waited for
    # its whole stop_grace).
    runtime = Runtime.get()
    procs = hosts.slice(hosts=HOSTS - 1).spawn_procs(per_host={"gpus": 2})
    on_event = runtime.frame_kinds[headers.EVENT]
    held: list[tuple[Any, ...]] = []
    heard = threading.Event()

    def hold_exits(conn: Any, header: tuple[Any, ...], parts: Any) -> None:
        if headers.read(headers.Event, header).what == "exited":
            held.append((conn, header, parts))
            heard.set()
            return
        on_event(conn, header, parts)

    try:
        mesh = procs.spawn("w", Where)
        pids = [value["pid"] for value in mesh.where.call().get(timeout=30).values()]
        runtime.frame_kinds[headers.EVENT] = hold_exits
        os.kill(pids[0], signal.SIGKILL)
        assert heard.wait(30), "the agent did not report the worker's exit"
        call = mesh.where.call()
        runtime.frame_kinds[headers.EVENT] = on_event
        for event in held:
            runtime.call_soon(on_event, *event)
        with pytest.raises(ActorDiedError):
            call.get(timeout=20)
        # The neighbour's answer came: the call is over for it too.
        state = mesh._state
        wait_until(lambda: state.in_flight([0, 1]) == [0, 0], 20, "rank 1's answer")
    finally:
        runtime.frame_kinds[headers.EVENT] = on_event
        procs.stop().get(timeout=60)


def test_deep_actors_print_call_each_other_and_restart_in_place(
    network: Network, hosts: HostMesh, where: ActorMesh[Where], capfd: pytest.CaptureFixture[str]
) -> None:
    deep = where.slice(hosts=HOSTS - 1, gpus=0)
    deep.say.call_one("hello from the bottom of the tree").get(timeout=30)
    deadline = time.monotonic() + 10
    text = ""
    while "hello from the bottom" not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text += capfd.readouterr().out
    assert f"[where {{hosts={HOSTS - 1}, gpus=0}}] hello from the bottom of the tree" in text
    reached = deep.call_other.call_one(where, {"hosts": 1, "gpus": 1}).get(timeout=30)
    assert f"|tcp://{network.hosts[1].ip}:" in str(reached["address"])
    with hosts.spawn_procs(per_host={"gpus": 1}, restart="rank") as procs:
        mesh = procs.spawn("phoenix", Where)
        before = mesh.where.call().get(timeout=30).values()
        with pytest.raises(ActorDiedError, match="restarting the rank"):
            mesh.slice(hosts=HOSTS - 1).crash.call_one(3).get(timeout=30)
        after = mesh.where.call().get(timeout=60).values()
        assert after[-1]["address"] == before[-1]["address"]
        assert after[-1]["pid"] != before[-1]["pid"]


def test_threads_calling_by_plan_while_the_topology_moves_all_get_their_answers(
    hosts: HostMesh, where: ActorMesh[Where]
) -> None:
    # Each restart of a rank of another mesh is a lost and a revived process: the plan of
    # `where` is made again while three threads call it. Each call must go by a plan its
    # agents know (a replaced one would be dropped: a call waiting forever, a broadcast
    # lost).
    size = 2 * HOSTS
    outcomes: list[str] = []
    done = threading.Event()

    def caller(thread: int) -> None:
        i = 0
        while not done.is_set():
            i += 1
            try:
                if i % 3 == 0:
                    where.note.broadcast(thread, i)
                    got = list(where.noted.call(thread).get(timeout=20).values())
                    outcomes.append("ok" if got == [i] * size else f"lost: {got}")
                elif i % 3 == 1:
                    got = list(where.rank_plus.call(i).get(timeout=20).values())
                    outcomes.append("ok" if got == [r + i for r in range(size)] else "wrong")
                else:
                    total = where.rank_plus.reduce(operator.add)(i).get(timeout=20)
                    outcomes.append("ok" if total == sum(range(size)) + size * i else "wrong")
            except Exception as error:
                outcomes.append(f"{type(error).__name__}: {error}")

    moved = Runtime.get().topology
    with hosts.spawn_procs(per_host={"gpus": 1}, restart="rank", max_restarts=100) as procs:
        mesh = procs.spawn("mover", Where)
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(3)]
        for thread in threads:
            thread.start()
        try:
            for crash in range(12):
                with pytest.raises(ActorDiedError):
                    mesh.slice(hosts=crash % HOSTS).crash.call_one(3).get(timeout=30)
                mesh.slice(hosts=crash % HOSTS).restarts.call_one().get(timeout=60)
        finally:
            done.set()
            for thread in threads:
                thread.join(timeout=60)
    assert Runtime.get().topology - moved >= 24  # every crash and every restart counted
    assert len(outcomes) > 12 and set(outcomes) == {"ok"}, sorted(set(outcomes))
    assert [s["in_flight"] for s in where._state.stats().values()] == [0] * size


def test_one_thread_at_a_time_chooses_a_plan_and_casts_by_it(where: ActorMesh[Where]) -> None:
    where.rank_plus.call(0).get(timeout=30)
    order: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def first(plan: Any) -> bool:
        order.append("first")
        inside.set()
        assert release.wait(30)
        return False  # (sends nothing)

    def second(plan: Any) -> bool:
        order.append("second")
        return False

    one = threading.Thread(target=by_plan, args=(where, first))
    one.start()
    assert inside.wait(30)
    two = threading.Thread(target=by_plan, args=(where, second))
    two.start()
    two.join(0.5)  # (how long it is watched: it cannot go on while `first` holds the plan)
    assert two.is_alive() and order == ["first"]
    release.set()
    one.join(30)
    two.join(30)
    assert order == ["first", "second"]


def test_a_cast_by_a_plan_an_agent_does_not_know_fails_at_once_naming_it(
    where: ActorMesh[Where],
) -> None:
    where.rank_plus.call(0).get(timeout=30)
    state = where._state
    assert state.plan is not None
    runtime, version, plan = state.plan
    unknown = Plan(plan.mesh_id, plan.ident + 1000, plan.version, plan.tops, plan.routes)
    unknown.taught = True  # as if its CastPlan had gone down: it has not
    state.plan = (runtime, version, unknown)
    try:
        with pytest.raises(ActorError, match=f"does not know plan {plan.ident + 1000}"):
            where.rank_plus.call(0).get(timeout=20)
        assert [s["in_flight"] for s in state.stats().values()] == [0] * (2 * HOSTS)
    finally:
        state.plan = None
    assert list(where.rank_plus.call(0).get(timeout=30).values()) == list(range(2 * HOSTS))


class _Job:
    """A program of ``multihost_programs.py`` (``stream`` unless said) as the controller
    of a tree of every namespace's agent."""

    def __init__(
        self, network: Network, env: dict[str, str], program: tuple[str, ...] = ("stream",)
    ) -> None:
        with socket.socket() as probe:
            probe.bind((network.controller_ip, 0))
            port = probe.getsockname()[1]
        listen = f"{network.controller_ip}:{port}"
        secret = os.urandom(16).hex()
        command = [sys.executable, str(Path(HERE, "multihost_programs.py")), program[0]]
        self.network = network
        self.before = {h.netns: set(network.processes_in(h)) for h in network.hosts}
        self.controller = subprocess.Popen(
            [*command, listen, str(HOSTS), *program[1:]],
            env={
                **os.environ,
                "ACTORMESH_FAN_OUT": str(FAN_OUT),
                "ACTORMESH_SECRET": secret,
                **env,
            },
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.agents = [network.start_agent(h, listen, secret) for h in network.hosts]

    def line(self, timeout: float) -> str:
        stdout = self.controller.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        assert ready, f"no line from the controller within {timeout} s"
        return stdout.readline()

    def say(self, text: str) -> None:
        assert self.controller.stdin is not None
        self.controller.stdin.write(text + "\n")
        self.controller.stdin.flush()

    def started(self) -> set[int]:
        """The processes of the job in the namespaces (agents, workers, templates)."""
        return {
            pid
            for h in self.network.hosts
            for pid in set(self.network.processes_in(h)) - self.before[h.netns]
        }

    def end(self) -> None:
        self.controller.kill()
        self.controller.wait(10)
        for pid in self.started():  # what a cut-off host could not hear of
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for agent in self.agents:
            agent.wait(15)


def _stream_and_break(
    network: Network, env: dict[str, str], cut: bool, position: int = VICTIM
) -> dict[str, Any]:
    """Run the ``stream`` program on a tree, break the agent of host ``position``
    (SIGKILL, or its link cut) in the middle of the stream; the program's report."""
    victim = network.hosts[position]
    job = _Job(network, env)
    try:
        assert job.line(120).startswith("READY")
        job.say(f"go {position}")
        assert job.line(60).startswith("STREAMING")
        if cut:
            ip("-n", victim.netns, "link", "set", "eth0", "down")
        else:
            job.agents[position].send_signal(signal.SIGKILL)
        report: dict[str, Any] = json.loads(job.line(120))
        return report
    finally:
        if cut:
            ip("-n", victim.netns, "link", "set", "eth0", "up")
        job.end()


def _check_report(network: Network, report: dict[str, Any], position: int = VICTIM) -> None:
    outcomes = report["outcomes"]
    failures = [o for o in outcomes if not o["ok"]]
    assert failures, "the stream went on past the agent's death without one failure"
    dead_ip = network.hosts[position].ip
    for failure in failures:  # every call answered, or failed naming the dead host
        assert failure["error"] == "ActorDiedError", failure
        assert f"({dead_ip})" in failure["message"], failure
    assert report["next"] == {"ok": True, "cast": True}, report["next"]
    # The controller holds a connection to the agents it reaches first only: the dead
    # agent's children were adopted by their grandparent, or by the controller itself
    # when the dead one was at the top (_uplink).
    on_top = set(range(FAN_OUT)) - {position}
    if position < FAN_OUT:
        on_top |= set(_tree.children(position, HOSTS, FAN_OUT))
    assert report["joined"] == sorted(on_top)


def test_an_interior_agent_killed_mid_stream_fails_only_what_it_must(network: Network) -> None:
    _check_report(network, _stream_and_break(network, {}, cut=False))


def test_an_interior_agent_cut_off_mid_stream_is_routed_around(network: Network) -> None:
    _check_report(network, _stream_and_break(network, BEAT, cut=True))


def test_a_deeper_interior_agent_killed_mid_stream_leaves_its_children_to_the_one_above(
    network: Network,
) -> None:
    # Host FAN_OUT hangs under host 0 and relays to hosts of the third level: host 0's
    # agent adopts them, and the controller still holds no connection to them.
    assert _tree.children(FAN_OUT, HOSTS, FAN_OUT), "the tree is too small for this test"
    _check_report(network, _stream_and_break(network, {}, cut=False, position=FAN_OUT), FAN_OUT)


def _tcp_peers(pid: int) -> list[str]:
    """The remote IPv4 addresses of process ``pid``'s established TCP connections (from
    its network namespace's table, by the inodes of its sockets)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    peers = []
    with open(f"/proc/{pid}/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED, ours
                packed = struct.pack("<I", int(fields[2].split(":")[0], 16))
                peers.append(socket.inet_ntoa(packed))
    return peers


def _agent_pid(network: Network, host: Any) -> int:
    for pid in network.processes_in(host):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if b"\0host\0--join\0" in cmdline.read():
                return pid
    raise AssertionError(f"no host agent runs in {host.netns}")


def test_only_the_agents_the_controller_reaches_first_keep_a_connection_to_it(
    network: Network, where: ActorMesh[Where]
) -> None:
    for index, host in enumerate(network.hosts):
        to_controller = _tcp_peers(_agent_pid(network, host)).count(network.controller_ip)
        if index < FAN_OUT:
            assert to_controller >= 1, f"the agent of host {index} has no connection to it"
        else:
            assert to_controller == 0, f"the agent of host {index} is joined to it directly"
    # The others answer its requests, and tell it of their workers, through the tree.
    runtime = Runtime.get()
    deep = [link for link in runtime.agents.values() if link.tree is not None][-1]
    assert runtime.run_sync(deep.listen_for_peers(), timeout=30).startswith("tcp://")
    assert len(where.where.call().get(timeout=30)) == 2 * HOSTS


def test_an_agent_below_the_top_declared_dead_ends_as_if_its_connection_closed(
    network: Network,
) -> None:
    # The controller holds no connection of its own to close: it tells the agent down
    # the tree, and the agent ends (with its workers) as when its owner hangs up.
    mesh, agents = _tree_on(network)
    try:
        runtime = Runtime.get()
        link = mesh._hosts.links[HOSTS - 1]  # a leaf, below the top
        assert as_routed(link.conn) is not None
        runtime.loop.call_soon_threadsafe(runtime.children.declare_dead, link.process, "test")
        assert agents[HOSTS - 1].wait(timeout=30) == 0
        assert all(agent.poll() is None for agent in agents[: HOSTS - 1])
    finally:
        mesh.shutdown().get(timeout=60)
        for agent in agents:
            agent.wait(timeout=15)


def test_the_controller_probes_only_the_agents_it_casts_to(where: ActorMesh[Where]) -> None:
    runtime = Runtime.get()
    monitor = runtime.children.heartbeat
    assert monitor is not None
    links = [link for link in runtime.agents.values() if link.tree is not None]
    probed = {link.address for link in links if link.process.listen_path in monitor._watched}
    assert probed == {link.address for link in links[:FAN_OUT]}


def test_a_deeper_agent_cut_off_is_found_by_its_parents_heartbeats(network: Network) -> None:
    # Host FAN_OUT hangs under host 0: only host 0's agent probes it.
    report = _stream_and_break(network, BEAT, cut=True, position=FAN_OUT)
    _check_report(network, report, FAN_OUT)
    assert any("its parent agent's heartbeats" in o.get("message", "") for o in report["outcomes"])


def test_killing_the_controller_of_a_tree_empties_every_namespace(network: Network) -> None:
    job = _Job(network, {})
    try:
        assert job.line(120).startswith("READY")
        started = job.started()
        assert len(started) >= 2 * HOSTS  # an agent and a worker on each host at least
        job.controller.kill()
        killed = time.monotonic()
        # Each agent hears of it itself (its own connection to the controller), as with
        # one level. (32 hosts' processes dying on two loaded cores took 3 to 10 s: the
        # slow run only checks that they all go.)
        limit = 2.5 if HOSTS <= 8 else 30.0
        while job.started() & started:
            assert time.monotonic() - killed < limit, "the namespaces did not empty"
            time.sleep(0.05)
    finally:
        job.end()


def test_leased_agents_of_a_tree_are_probed_by_the_controller_itself(
    network: Network, tmp_path: Path
) -> None:
    # A leased agent detaches when its controller's heartbeats stop: in a tree it must
    # still get them from the controller, not only from its parent agent.
    job = _Job(network, {"ACTORMESH_JOBS_DIR": str(tmp_path)}, ("leased_tree", "treejob"))
    try:
        assert json.loads(job.line(120)) == {"links": HOSTS, "probed": HOSTS}
        assert job.controller.wait(60) == 0
    finally:
        job.end()
