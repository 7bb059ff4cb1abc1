"""Workers forked from the fork server are the workers a fresh start makes.

Each owner keeps one template process that has imported a worker's modules and forks
workers from it (``actormesh._hosts._forkserver``). These tests look at real forked
workers from outside (``/proc``) and inside, restart one, kill the template, turn the
server off, and kill a controller to see that nothing it forked outlives it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration_actors import Echo, ProcessFacts
from integration_support import kill_controller_and_wait

from actormesh import ProcMesh, proc_mesh
from actormesh._hosts import Runtime
from actormesh._hosts._forkserver import ForkedPopen, available
from actormesh.testing import process_gone, wait_until

pytestmark = pytest.mark.skipif(not available(), reason="the compiled fork is not built")


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        pairs = [entry.split(b"=", 1) for entry in environ.read().split(b"\0") if b"=" in entry]
    return {name.decode(): value.decode() for name, value in pairs}


def _forked_children() -> dict[int, bool]:
    """The controller's workers now: pid -> whether it was forked by the template."""
    return {
        child.pid: isinstance(child.popen, ForkedPopen)
        for child in Runtime.get().children.processes.values()
        if child.alive()
    }


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProcMesh]:
    # A variable set after the template started: a forked worker must still have it.
    monkeypatch.setenv("ACTORMESH_TEST_MARK", os.urandom(4).hex())
    mesh = proc_mesh(gpus=2).get(timeout=60)
    try:
        yield mesh
    finally:
        mesh.stop().get(timeout=30)


def test_a_forked_worker_is_the_controllers_child_with_a_fresh_workers_identity(
    marked: ProcMesh,
) -> None:
    facts = marked.spawn("facts", ProcessFacts).facts.call().get(timeout=30).values()
    pids = [fact["pid"] for fact in facts]
    forked = _forked_children()
    assert all(forked[pid] for pid in pids)  # they came from the template
    mark = os.environ["ACTORMESH_TEST_MARK"]
    for fact in facts:
        pid = fact["pid"]
        assert fact["ppid"] == os.getpid()  # the owner's own child, not the template's
        assert fact["sid"] == pid  # its own session, as start_new_session gives
        assert fact["cwd"] == os.getcwd()
        assert fact["cmdline"] == [sys.executable, "-m", "actormesh._bootstrap"]
        assert fact["mark"] == mark
        # What tools and leak checks read from outside: the worker's own environment.
        environ = _environ(pid)
        assert environ["ACTORMESH_TEST_MARK"] == mark
        assert environ["ACTORMESH_PARENT_PID"] == str(os.getpid())
        assert "ACTORMESH_KEY" in environ
        assert not any(name.startswith("ACTORMESH_FORK_SERVER") for name in environ)
    template = Runtime.get().children.forks
    assert template is not None and template.pid not in pids
    # The template carries no worker's or test's identity that a process search could
    # mistake for one of them.
    environ = _environ(template.pid)
    assert "ACTORMESH_TEST_MARK" not in environ and "ACTORMESH_KEY" not in environ


def test_a_dead_template_costs_one_fresh_start_and_is_replaced() -> None:
    first = proc_mesh(gpus=1).get(timeout=60)
    first.stop().get(timeout=30)
    template = Runtime.get().children.forks
    assert template is not None
    os.kill(template.pid, signal.SIGKILL)
    wait_until(lambda: process_gone(template.pid), 5, "the template to exit")
    # The next spawn finds it gone, starts its workers afresh and says so once...
    mesh = proc_mesh(gpus=2).get(timeout=60)
    try:
        assert mesh.spawn("echo", Echo).ping.call().get(timeout=30).values() == ["pong"] * 2
        assert not any(_forked_children().values())
    finally:
        mesh.stop().get(timeout=30)
    # ...and the one after forks again, from a new template.
    mesh = proc_mesh(gpus=2).get(timeout=60)
    try:
        assert mesh.spawn("echo", Echo).ping.call().get(timeout=30).values() == ["pong"] * 2
        assert all(_forked_children().values())
        replacement = Runtime.get().children.forks
        assert replacement is not None and replacement.pid != template.pid
    finally:
        mesh.stop().get(timeout=30)


def test_a_restarted_rank_is_forked_again() -> None:
    mesh = proc_mesh(gpus=2, restart="rank", max_restarts=2, restart_window=60).get(timeout=60)
    try:
        echo = mesh.spawn("echo", Echo)
        old = echo.slice(gpus=1).pid.call_one().get(timeout=30)
        os.kill(old, signal.SIGKILL)
        wait_until(
            lambda: old not in _forked_children() and len(_forked_children()) == 2,
            30,
            "rank 1 to be restarted",
        )
        new = mesh.spawn("echo_again", Echo).slice(gpus=1).pid.call_one().get(timeout=30)
        assert new != old and _forked_children()[new]
    finally:
        mesh.stop().get(timeout=30)


def test_with_the_fork_server_off_workers_start_as_fresh_interpreters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = Runtime.get()
    monkeypatch.setattr(runtime, "config", dataclasses.replace(runtime.config, fork_server=False))
    mesh = proc_mesh(gpus=2).get(timeout=60)
    try:
        assert mesh.spawn("echo", Echo).ping.call().get(timeout=30).values() == ["pong"] * 2
        forked = _forked_children()
        assert len(forked) == 2 and not any(forked.values())
    finally:
        mesh.stop().get(timeout=30)


_CONTROLLER = """
import sys
from actormesh import proc_mesh
from actormesh._hosts import Runtime
mesh = proc_mesh(gpus=2).get(timeout=60)
children = [c.pid for c in Runtime.get().children.processes.values()]
print(Runtime.get().children.forks.pid, *children, flush=True)
sys.stdin.read()
"""


def test_nothing_forked_outlives_a_killed_controller() -> None:
    # The template and two workers it forked.
    kill_controller_and_wait(_CONTROLLER, 3, 5, "the template and the workers to exit")


_EARLY_PROGRAM = """
import json, os, sys
from actormesh import Actor, endpoint, proc_mesh  # reaching for these starts the template
from actormesh import _template_start

early = _template_start._early
started = early.process.pid if early is not None else None
if sys.argv[1] == "spawn":
    from actormesh._hosts import Runtime

    class Pid(Actor):
        @endpoint
        def pid(self) -> int:
            from actormesh import _template_start as inside  # a worker starts none
            assert inside._early is None
            return os.getpid()

    procs = proc_mesh(gpus=2).get(timeout=60)
    pids = sorted(procs.spawn("p", Pid).pid.call().get(timeout=60).values())
    forks = Runtime.get().children.forks
    print(json.dumps({"started": started, "template": forks.pid,
                      "adopted": forks.adopted_early, "workers": pids}))
    procs.stop().get(timeout=30)
else:
    print(json.dumps({"started": started}))
"""


def _run_early(mode: str, **env: str) -> dict[str, object]:
    import json
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", _EARLY_PROGRAM, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_template_starts_with_the_programs_imports_and_its_first_spawn_adopts_it() -> None:
    facts = _run_early("spawn")
    assert isinstance(facts["started"], int)
    assert facts["template"] == facts["started"] and facts["adopted"] is True
    # The program has exited: its template and workers went with it.
    for pid in [facts["started"], *facts["workers"]]:  # type: ignore[list-item]
        wait_until(lambda pid=pid: process_gone(pid), 10, f"process {pid} to end")


def test_a_template_nobody_used_ends_with_the_program() -> None:
    facts = _run_early("import only")
    pid = facts["started"]
    assert isinstance(pid, int)
    wait_until(lambda: process_gone(pid), 10, f"the unused template {pid} to end")


@pytest.mark.parametrize(
    "env", [{"ACTORMESH_FORK_SERVER": "0"}, {"ACTORMESH_NO_EXTENSIONS": "1"}], ids=str
)
def test_no_template_starts_early_when_forking_is_off(env: dict[str, str]) -> None:
    assert _run_early("import only", **env)["started"] is None


_MULTIPROCESSING_CHILD = """
import json, multiprocessing, sys

def child(answers):
    from actormesh import Actor  # in a controller, reaching for it starts a template
    from actormesh import _template_start
    answers.put(_template_start._early is None)

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    process = context.Process(target=child, args=(answers,))
    process.start()
    print(json.dumps({"none_in_child": answers.get(timeout=60)}))
    process.join(60)
"""


def test_a_multiprocessing_child_starts_no_template(tmp_path: Path) -> None:
    # A spawned child (a DataLoader worker, say) imports the program's main module again;
    # it is no controller, and a template of its own would idle as long as it lives.
    import json
    import subprocess

    program = tmp_path / "spawns_a_child.py"
    program.write_text(_MULTIPROCESSING_CHILD)
    result = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"none_in_child": True}


TEMPLATE_OWNER_GONE = """
import socket
owner, template_end = socket.socketpair()
owner.close()  # the program that imported actormesh has ended already
from actormesh._hosts import _template
_template.main([str(template_end.detach())])
print("returned")
"""


@pytest.mark.timeout(60)
def test_a_template_whose_owner_ended_before_it_was_ready_returns_quietly() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TEMPLATE_OWNER_GONE], capture_output=True, text=True, timeout=50
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "returned\n", "")
