"""``actormesh top`` driven in tmux at 80x24: keys pressed, the screen read back."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
from collections.abc import Iterator

import pytest
from observe_support import ACTORMESH, Tmux

from actormesh.testing import wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


@pytest.fixture
def screen(job_factory) -> Iterator[Tmux]:
    job = job_factory("serve", 4)
    tmux = Tmux(shlex.join([*ACTORMESH, "top", "--job", str(job.pid)]))
    try:
        yield tmux
    finally:
        tmux.close()


def rank_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(" trainer ")]


def test_top_shows_every_rank_with_its_numbers_in_80_columns(screen: Tmux) -> None:
    text = screen.wait_for(r"(?m)^ trainer +3 ")
    lines = text.splitlines()
    assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
    assert "observe_job.py serve 4" in lines[0]
    assert re.search(r"trainer: (\S+\.)?Trainer \{gpus=4\} on ", text)
    header = next(line for line in lines if "RANK" in line)
    for title in ("MESH", "HOST", "PID", "STATE", "Q", "INF", "ERR", "RST", "P50", "P99"):
        assert f" {title}" in header
    assert header.rstrip().endswith("CPU%   RSS")
    rows = rank_lines(text)
    assert [row.split()[1] for row in rows] == ["0", "1", "2", "3"]
    # rank 1 raised once (ERR), and every rank's P50 and RSS are measured numbers.
    err = header.index(" ERR")
    errors: dict[str, str] = {}

    def counted() -> bool:
        # Until a refresh has counted rank 1's failed call and measured its RSS.
        rows = rank_lines(screen.screen())
        errors.update({row.split()[1]: row[err : err + 4].strip() for row in rows})
        return errors.get("1") == "1" and any(re.search(r"^ trainer +1 .*M$", r) for r in rows)

    wait_until(counted, 30, "rank 1's error to be counted")
    assert errors == {"0": "0", "1": "1", "2": "0", "3": "0"}
    footer = screen.wait_for(r"q Quit +\? Help").splitlines()
    assert any("q Quit" in line for line in footer[-3:])  # the keys, at the bottom


def test_top_keys_help_sort_filter_details_and_quit(screen: Tmux) -> None:
    screen.wait_for(r"(?m)^ trainer +3 ")
    screen.keys("?")
    assert "one line per rank of every mesh" in screen.wait_for("this help")
    screen.keys("x")
    screen.wait_for(r"sort: rank")
    screen.keys("r")
    text = screen.wait_for(r"sort: rank \(reversed\)")
    assert [row.split()[1] for row in rank_lines(text)] == ["3", "2", "1", "0"]
    screen.keys("s")
    screen.wait_for(r"sort: state")
    screen.keys("/")
    screen.wait_for("mesh name")
    screen.keys("nomatch", "Enter")
    text = screen.wait_for("mesh: nomatch")
    assert rank_lines(text) == []
    screen.keys("Escape")
    screen.wait_for(r"(?m)mesh: all")
    screen.keys("m")
    text = screen.wait_for(r"mesh: trainer")
    assert len(rank_lines(screen.wait_for(r"(?m)^ trainer +\d"))) == 4
    screen.keys("Enter")
    details = screen.wait_for("ENDPOINT +CALLS")
    assert "trainer {gpus=" in details
    for endpoint in ("step", "ping"):
        assert f" {endpoint} " in details
    assert "round trips from the controller" in details
    screen.keys("x")
    screen.wait_for(r"(?m)^ trainer +\d")
    screen.keys("q")
    assert "EXITED 0" in screen.wait_for("EXITED")


def test_top_services_view_shows_replicas_restarts_and_their_ranks(job_factory) -> None:
    job = job_factory("service", 2)
    tmux = Tmux(shlex.join([*ACTORMESH, "top", "--services", "--job", str(job.pid)]))
    try:
        replica = r"(?m)^ gen +{} serving .*$"
        text = tmux.wait_for(replica.format(1))
        lines = text.splitlines()
        assert all(len(line) <= 80 for line in lines)
        assert re.search(r"gen: (\S+\.)?Trainer 2 x \{tp=2\} version \d+", text)
        header = next(line for line in lines if "SERVICE" in line)
        for title in ("REP", "STATE", "Q", "INF", "DONE", "FAIL", "REQ/S", "RST", "VER"):
            assert f" {title}" in header
        # Calls are answered and weights refitted: DONE and VER move on.
        done, ver = header.index(" DONE"), header.index(" VER")

        def row(index: int) -> str:
            found = re.search(replica.format(index), tmux.screen())
            return found.group(0) if found else ""

        def numbers(index: int) -> tuple[int, int]:
            line = row(index)
            cells = (line[done : done + 8].strip(), line[ver : ver + 5].strip())
            return (int(cells[0]), int(cells[1])) if all(c.isdigit() for c in cells) else (0, 0)

        wait_until(lambda: numbers(0)[0] + numbers(1)[0] > 20, 60, "calls answered")
        wait_until(lambda: numbers(0)[1] >= 1 and numbers(1)[1] >= 1, 60, "a refit")
        # SIGKILL a rank of replica 1 (from its PIDS): the replica restarts as a unit.
        victim = int(row(1).split()[-1].split(",")[1])
        os.kill(victim, signal.SIGKILL)
        rst = header.index(" RST")

        def restarted() -> bool:
            line = row(1)
            return line[rst : rst + 4].strip() == "1" and str(victim) not in line

        wait_until(restarted, 90, "replica 1 to be rebuilt and serving again")
        # Enter on a replica shows its ranks (its process mesh gen.<replica>).
        tmux.keys("Enter")
        text = tmux.wait_for(r"(?m)^ gen\.\d +1 ")
        assert re.search(r"mesh: gen\.\d", text)
        tmux.keys("v")
        tmux.wait_for("view: services")
        tmux.keys("q")
        assert "EXITED 0" in tmux.wait_for("EXITED")
    finally:
        tmux.close()
