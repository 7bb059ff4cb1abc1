"""Every program in ``examples/`` runs to completion and prints what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from integration_support import REPO

EXAMPLES = REPO / "examples"


def run_example(name: str) -> str:
    """Run one example as a user would; return its stdout (stderr must be empty)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", f"{name} wrote to stderr:\n{done.stderr}"
    return done.stdout


def test_every_example_is_run_by_a_test_and_by_the_demo() -> None:
    tested = {"hello_world.py", "ping_pong.py", "slicing_2d.py", "sync_style.py", "streaming.py"}
    # The actor-group examples are run by tests/groups/test_group_examples.py.
    tested |= {"actor_group.py", "weight_sync.py", "rl_loop.py"}
    # The rpc examples are run by tests/rpc/test_rpc_examples.py.
    tested |= {"rpc_reinforce.py", "rpc_parameter_server_rnn.py"}
    # The service example is run by tests/services and tests/faults (a replica killed).
    tested |= {"rl_service.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested
    demo = (REPO / "scripts" / "demo").read_text()
    listed = re.search(r"EXAMPLES=\((.*?)\)", demo, re.S)
    assert listed is not None
    assert set(listed.group(1).split()) == tested


def test_hello_world_prints_from_each_of_four_actors() -> None:
    out = run_example("hello_world.py")
    for rank in range(4):
        assert (
            f"[toy_actor {{gpus={rank}}}] Identity: {rank}, msg='hey there, from jupyter!!'" in out
        )
        assert (
            f"[toy_actor {{gpus={rank}}}] Identity: {rank}, "
            f'msg="Here\'s an arbitrary unique value: {rank}"' in out
        )
    assert len(out.splitlines()) == 8


def test_ping_pong_prints_the_four_lines_of_the_seed() -> None:
    out = run_example("ping_pong.py")
    expected = [
        "Pong!, Receiver (actor_1:0) received msg Sender (actor_0:0) msg='Ping'",
        "Pong!, Receiver (actor_1:1) received msg Sender (actor_0:1) msg='Ping'",
        "Pong!, Receiver (actor_0:0) received msg Sender (actor_1:0) msg='Ping'",
        "Pong!, Receiver (actor_0:1) received msg Sender (actor_1:1) msg='Ping'",
    ]
    # Each line carries the printing actor's prefix; without it, the seed's output. The two
    # actors of one mesh print at the same time, from two processes, in either order.
    lines = out.splitlines()
    assert sorted(re.sub(r"^\[\S+ \{[^}]*\}\] ", "", line) for line in lines) == sorted(expected)
    assert "[actor_1 {gpus=0}] " + expected[0] in lines
    assert "[actor_0 {gpus=1}] " + expected[3] in lines


def test_slicing_2d_reaches_the_selected_actors() -> None:
    out = run_example("slicing_2d.py")
    assert "slice(dp=1): shape {tp=2}, 2 actor(s)" in out
    assert "{'tp': 0} -> rank 2 at {'dp': 1, 'tp': 0}" in out
    assert "mesh[1, 0]: rank 2 at {'dp': 1, 'tp': 0}" in out
    assert "flatten('rank'): shape {rank=4}, 4 actor(s)" in out
    assert "rename(dp='replica'): shape {replica=2, tp=2}, 4 actor(s)" in out
    assert "item(dp=0, tp=1): rank 1 at {'dp': 0, 'tp': 1}" in out
    assert "workers.slice(pp=0) -> DimensionError" in out
    assert "workers[2, 0] -> IndexError" in out


def test_sync_style_runs_without_asyncio() -> None:
    assert "import asyncio" not in (EXAMPLES / "sync_style.py").read_text()
    out = run_example("sync_style.py")
    assert "after add(5) on all: [105, 105]" in out
    assert "after add(10) on gpus=1: 115" in out
    assert "three more adds on gpus=0: [106, 108, 111]" in out
    assert out.rstrip().endswith("processes stopped")


def test_streaming_yields_results_in_arrival_order() -> None:
    out = run_example("streaming.py")
    woke = re.findall(r"rank (\d) woke up", out.split("choose picked")[0])
    assert woke == ["3", "2", "1", "0"]
    assert re.search(r"choose picked: rank \d woke up", out)
    assert "every actor got the broadcast: True" in out


@pytest.mark.parametrize("name", ["hello_world.py", "ping_pong.py"])
def test_seed_programs_differ_from_the_seed_only_in_imports(name: str) -> None:
    source = (EXAMPLES / name).read_text()
    assert not re.search(r"^\s*(from|import) monarch", source, re.M)
    # The seed's own import lines, with actormesh in place of monarch.
    assert "from actormesh.actor_mesh import Actor, current_rank, endpoint" in source
    assert "from actormesh.proc_mesh import" in source


def test_the_readme_api_tour_runs(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    tour = re.search(r"## API tour\n\n```python\n(.*?)```", readme, re.S)
    assert tour is not None, "README.md has no API tour code block"
    program = tmp_path / "tour.py"
    program.write_text(tour.group(1))
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    # stream() printed one value per actor: sum([3.0]) * 1e-3 from each of the 4.
    assert done.stdout.split() == ["0.003"] * 4
