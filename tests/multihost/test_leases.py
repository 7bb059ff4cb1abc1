"""Jobs that outlive their controller, on three network-namespace hosts (docs/leases.md).

Each test starts a leased job from a controller program of its own
(``lease_programs.py start``) whose host agents run in the namespaces
(``actormesh host --join``, as a cluster launcher would start them), kills or lets go of
that controller, and comes back with another process (``lease_programs.py attach``).
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from multihost_support import HERE, Network, ip

from actormesh._api import _job_records
from actormesh._hosts._lease_line import ask
from actormesh._transport import AuthenticationError, connect_tcp, parse_tcp
from actormesh.testing import wait_until

pytestmark = pytest.mark.timeout(240)

PROGRAMS = str(Path(HERE, "lease_programs.py"))


@dataclass
class Job:
    """A leased job the test started: its controller, its agents, its record."""

    name: str
    network: Network
    env: dict[str, str]
    controller: subprocess.Popen[str]
    agents: list[subprocess.Popen[str]]
    started: float
    others: set[int] = field(default_factory=set)  # what ran in the namespaces before
    lines: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)

    def __post_init__(self) -> None:
        # The controller prints a line per step: a thread reads them as they come.
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.controller.stdout is not None
        for line in self.controller.stdout:
            self.lines.put(line)

    def line(self, timeout: float = 90) -> str:
        """The controller's next line."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the controller within {timeout} s") from None

    def record(self) -> _job_records.JobRecord:
        """The job's record, as its controller wrote it (LookupError: there is none)."""
        path = Path(self.env["ACTORMESH_JOBS_DIR"], f"{self.name}.json")
        if not path.exists():
            raise LookupError(path)
        data = json.loads(path.read_text())
        return _job_records.JobRecord(**{**data, "agents": tuple(data["agents"])})

    def status(self) -> list[dict[str, Any]]:
        record = self.record()
        answers = []
        for address in record.agents:
            sock, answer = ask(address, record.secret, {"op": "status"}, timeout=10)
            sock.close()
            answers.append(answer)
        return answers

    def processes(self) -> set[int]:
        """The job's processes in the namespaces (agents, workers, fork templates)."""
        found = {pid for host in self.network.hosts for pid in self.network.processes_in(host)}
        return found - self.others

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``lease_programs.py ARGS`` as another controller, to its end."""
        return subprocess.run(
            [sys.executable, PROGRAMS, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _kill_job(job: Job) -> None:
    """End whatever is left of ``job`` (its agents end their workers)."""
    job.controller.kill()
    job.controller.wait(10)
    try:
        record = job.record()
    except LookupError:
        record = None
    if record is not None:
        for address in record.agents:
            try:
                sock, _ = ask(address, record.secret, {"op": "kill"}, timeout=5)
                sock.close()
            except OSError:
                pass  # ended already
    for agent in job.agents:
        try:
            agent.wait(15)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(10)


@pytest.fixture(params=[None, 2], ids=["one-level", "tree"])
def start_job(network: Network, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Start a leased job on the three namespaces: ``start_job(name, keep_alive)``; its
    agents one level, or a tree of fan-out 2 (host 2's agent joined through host 0's)."""
    started: list[Job] = []
    fan_out = {} if request.param is None else {"ACTORMESH_FAN_OUT": str(request.param)}

    def start(name: str, keep_alive: float) -> Job:
        others = {pid for host in network.hosts for pid in network.processes_in(host)}
        env = {"ACTORMESH_SECRET": os.urandom(16).hex(), "ACTORMESH_JOBS_DIR": str(tmp_path)}
        env.update(fan_out)
        with socket.socket() as probe:
            probe.bind((network.controller_ip, 0))
            listen = f"{network.controller_ip}:{probe.getsockname()[1]}"
        began = time.time()
        controller = subprocess.Popen(
            [sys.executable, PROGRAMS, "start", name, str(keep_alive), listen, "3"],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            text=True,
        )
        agents = [network.start_agent(h, listen, env["ACTORMESH_SECRET"]) for h in network.hosts]
        job = Job(name, network, env, controller, agents, began, others)
        started.append(job)
        return job

    try:
        yield start
    finally:
        for job in started:
            _kill_job(job)


def _ready(job: Job) -> dict[str, Any]:
    line = job.line()
    assert line.startswith("READY"), line
    return dict(json.loads(line.split(" ", 1)[1]))


def test_a_killed_controller_comes_back_to_its_actors_with_their_state(start_job: Any) -> None:
    job = start_job("rl-exp", 600)
    ready = _ready(job)
    started_in = ready["answered"] - job.started
    # The controller is in the middle of its loop of calls when it is killed.
    steps = [int(job.line().split()[1]) for _ in range(20)]
    job.controller.send_signal(signal.SIGKILL)
    job.controller.wait(10)
    last = steps[-1]
    # The job goes on without it: every agent is detached, its workers alive.
    for status in job.status():
        assert not status["attached"] and status["workers"] == 2
        assert status["meshes"] == ["actors/counters", "hosts", "procs/trainers"]
    began = time.time()
    attached = job.run("attach", "rl-exp")
    assert attached.returncode == 0, attached.stderr
    first, after = (json.loads(line) for line in attached.stdout.splitlines()[-2:])
    assert first["names"] == ["counters", "rl-exp", "trainers"]
    # The same processes, with their state: every counter counted every call answered,
    # and the one in flight when the controller died where it got to (its frames leave
    # host by host: some hosts may have run it and others not).
    assert first["pids"] == ready["pids"]
    assert all(value in (last, last + 1) for value in first["values"]), (last, first)
    assert after["after"] == [value + 1 for value in first["values"]]
    assert first["failures"] == []
    print(
        f"\nstart from nothing: {started_in:.2f} s; re-attach (new controller start to first "
        f"answered call): {first['answered'] - began:.2f} s"
    )


def test_a_lease_ends_every_process_on_every_host_when_it_expires(start_job: Any) -> None:
    job = start_job("short-lease", 3)
    _ready(job)
    ours = job.processes()
    # An agent, a fork server template (where workers are forked) and two workers per host.
    assert len(ours) >= 3 * 3
    job.controller.send_signal(signal.SIGKILL)
    job.controller.wait(10)
    assert all(not status["attached"] for status in job.status())
    wait_until(lambda: not job.processes() & ours, 60, "every namespace to empty")
    assert [agent.wait(15) for agent in job.agents] == [0, 0, 0]
    gone = job.run("attach", "short-lease")
    assert gone.returncode != 0 and "is gone" in gone.stderr


def test_a_second_controller_is_refused_unless_it_takes_over(start_job: Any) -> None:
    job = start_job("one-at-a-time", 600)
    _ready(job)
    # The job's own controller is attached: the next one is refused.
    refused = job.run("attach", "one-at-a-time")
    assert refused.returncode != 0
    assert "AttachRefusedError" in refused.stderr and "take_over=True" in refused.stderr
    assert all(status["attached"] for status in job.status())
    # Taking over detaches the first controller, which runs on without the job.
    took = job.run("attach", "one-at-a-time", "take_over")
    assert took.returncode == 0, took.stderr
    first = json.loads(took.stdout.splitlines()[-2])
    assert first["failures"] == [] and len(first["values"]) == 6
    line = job.line(30)
    while line.startswith("STEP"):
        line = job.line(30)
    # The first controller's next call failed; the process itself runs on. (Its message
    # says who took over, unless the worker's connection ended before the agent's notice
    # came: "died before answering", a race docs/leases.md names.)
    assert line.startswith("LOST ActorDiedError"), line
    assert "took over job" in line or "died before answering" in line, line
    assert job.controller.poll() is None


def test_a_wrong_secret_is_refused_before_anything_is_unpickled(
    start_job: Any, tmp_path: Path
) -> None:
    job = start_job("guarded", 600)
    _ready(job)
    record = job.record()
    host, port = parse_tcp(record.agents[0])
    with pytest.raises(AuthenticationError):
        connect_tcp(host, port, secret="not-the-secret", timeout=10)
    with pytest.raises(AuthenticationError):
        ask(record.agents[0], "not-the-secret", {"op": "kill"}, timeout=10)
    # A peer that sends a pickle instead of the handshake: it is never unpickled.
    marker = tmp_path / "unpickled"
    with socket.create_connection((host, port), timeout=10) as raw:
        raw.sendall(pickle.dumps(_Evil(str(marker))) * 64)
        raw.settimeout(30)
        with pytest.raises(OSError):
            while raw.recv(1 << 16):
                pass
            raise ConnectionResetError("closed")
    assert not marker.exists()
    bad = {**job.env, "ACTORMESH_JOBS_DIR": str(tmp_path / "forged")}
    forged = Path(bad["ACTORMESH_JOBS_DIR"])
    forged.mkdir()
    data = json.loads((Path(job.env["ACTORMESH_JOBS_DIR"]) / "guarded.json").read_text())
    (forged / "guarded.json").write_text(json.dumps({**data, "secret": "0" * 64}))
    attempt = subprocess.run(
        [sys.executable, PROGRAMS, "attach", "guarded", "take_over"],
        env={**os.environ, **bad},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert attempt.returncode != 0 and "AuthenticationError" in attempt.stderr
    # The job never noticed: its controller still runs it.
    assert all(status["attached"] for status in job.status())
    assert job.line(30).startswith("STEP")


class _Evil:
    """Unpickling this touches a file: proof that nobody unpickled it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.path),))


def test_failures_and_output_while_detached_reach_the_next_controller(
    start_job: Any, tmp_path: Path
) -> None:
    job = start_job("eventful", 600)
    ready = _ready(job)
    fifo = tmp_path / "say"
    os.mkfifo(fifo)
    job.controller.kill()
    job.controller.wait(10)
    # While nobody is attached: the actor on the first host prints, and a worker of the
    # third host dies. (A controller comes and goes first, to set the actor listening.)
    listen = subprocess.run(
        [sys.executable, "-c", _LISTEN, "eventful", str(fifo)],
        env={**os.environ, **job.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listen.returncode == 0, listen.stderr
    said = Path(str(fifo) + ".said")
    with open(fifo, "w", encoding="utf-8") as out:
        out.write("flood 3000\n")  # 3 MB: more than an agent keeps (1 MiB)
        out.flush()
        wait_until(said.exists, 30, "the actor to flood")
        said.unlink()
        out.write("while-detached\n")
    wait_until(said.exists, 30, "the actor to print")
    victim = ready["pids"][5]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: victim not in job.processes(), 30, "the worker to die")
    came = job.run("attach", "eventful")
    assert came.returncode == 0, came.stderr
    report = json.loads(came.stdout.splitlines()[-1])
    assert report["failures"] == [["counters", [5], "died"]]
    assert '[trainers {"hosts": 0, "gpus": 0}] heard while-detached' in came.stdout
    # The newest megabyte of output was kept; what came before it was dropped, and said so.
    assert "were dropped while no controller was attached" in came.stderr
    flood = [line for line in came.stdout.splitlines() if "] flood " in line]
    assert 900 < len(flood) < 1100 and "] flood 0 " not in came.stdout


def test_a_host_lost_while_detached_is_a_failure_for_the_next_controller(
    start_job: Any,
) -> None:
    job = start_job("host-lost", 600)
    ready = _ready(job)
    job.controller.kill()
    job.controller.wait(10)
    job.agents[1].kill()  # the second host's agent, and with it its workers
    job.agents[1].wait(10)
    lost = set(ready["pids"][2:4])
    wait_until(lambda: not lost & job.processes(), 30, "the host's workers to end")
    came = job.run("attach", "host-lost")
    assert came.returncode == 0, came.stderr
    report = json.loads(came.stdout.splitlines()[-1])
    assert report["failures"] == [["counters", [2, 3], "died"]]
    assert report["names"] == ["counters", "host-lost", "trainers"]
    assert len(report["values"]) == 2  # the first host's two, called at once
    assert "its host agent is gone" in came.stderr  # written: no failure hook was set


# Attach, have the first host's actor print what comes through a named pipe, and leave.
_LISTEN = """
import sys
import actormesh
job = actormesh.attach(sys.argv[1])
job.actor_meshes["counters"].slice(hosts=0, gpus=0).echo_from.call_one(sys.argv[2]).get(60)
"""


def _actormesh(job: Job, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actormesh._cli", *args],
        env={**os.environ, **job.env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_lists_runs_a_script_in_and_kills_a_leased_job(
    start_job: Any, tmp_path: Path
) -> None:
    job = start_job("cli-job", 600)
    _ready(job)
    ours = job.processes()
    job.controller.send_signal(signal.SIGKILL)
    job.controller.wait(10)
    listed = _actormesh(job, "jobs")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("cli-job "))
    assert "detached" in row and " 3/3 " in row and row.endswith("counters, trainers")
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    ran = _actormesh(job, "exec", "cli-job", str(script), "twice")
    assert ran.returncode == 0, ran.stderr
    before, after = (json.loads(line) for line in ran.stdout.splitlines()[-2:])
    assert after == [value + 2 for value in before] and len(before) == 6
    killed = _actormesh(job, "kill", "cli-job")
    assert killed.returncode == 0, killed.stderr
    assert "ended on 3 of 3 hosts" in killed.stdout
    wait_until(lambda: not job.processes() & ours, 60, "every namespace to empty")
    assert "cli-job " not in _actormesh(job, "jobs").stdout


# A driver script run by `actormesh exec`: the job is this process' already.
_DRIVER = """
import json
import sys
import actormesh
counters = actormesh.attach()["counters"]
print(json.dumps(counters.value.call().get(60).values()))
for _ in range(2 if sys.argv[1:] == ["twice"] else 1):
    counters.incr.call().get(60)
print(json.dumps(counters.value.call().get(60).values()))
"""


def test_a_host_cut_off_from_its_controller_ends_at_its_lease(
    start_job: Any, network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its controller's heartbeats stop (no hang-up ever comes): the agent detaches after
    # the heartbeat timeout, then its lease runs out, as if the controller had died.
    monkeypatch.setenv("ACTORMESH_HEARTBEAT_TIMEOUT", "2")
    monkeypatch.setenv("ACTORMESH_HEARTBEAT_INTERVAL", "0.5")
    job = start_job("partitioned", 3)
    _ready(job)
    host = network.hosts[0]
    there = set(network.processes_in(host)) - job.others
    assert there
    ip("-n", host.netns, "link", "set", "eth0", "down")
    try:
        wait_until(lambda: not set(network.processes_in(host)) & there, 60, "the host to empty")
    finally:
        ip("-n", host.netns, "link", "set", "eth0", "up")
    assert job.agents[0].wait(15) == 0


def test_another_session_attaches_with_the_secret_and_the_agents_addresses(
    start_job: Any, tmp_path: Path
) -> None:
    job = start_job("shared", 600)
    _ready(job)
    job.controller.kill()
    job.controller.wait(10)
    record = job.record()
    elsewhere = {**job.env, "ACTORMESH_JOBS_DIR": str(tmp_path / "elsewhere")}  # no record
    del elsewhere["ACTORMESH_SECRET"]
    given = json.dumps({"secret": record.secret, "agents": list(record.agents)})
    came = subprocess.run(
        [sys.executable, "-c", _ELSEWHERE, given],
        env={**os.environ, **elsewhere},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert came.returncode == 0, came.stderr
    values = json.loads(came.stdout.splitlines()[-1])
    # Every counter, as the killed controller's loop left them (one call at most apart).
    assert len(values) == 6 and max(values) - min(values) <= 1


# Attach with the secret and addresses given, not from a record.
_ELSEWHERE = """
import json, os, sys
import actormesh
os.environ.pop("ACTORMESH_SECRET", None)
given = json.loads(sys.argv[1])
job = actormesh.attach("shared", secret=given["secret"], agents=given["agents"])
print(json.dumps(job["counters"].value.call().get(60).values()))
"""
