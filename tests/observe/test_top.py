"""``actormesh top`` driven in tmux at 80x24: keys pressed, the screen read back."""

from __future__ import annotations

import re
import shlex
import shutil
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
