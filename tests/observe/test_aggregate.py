"""Identical lines of many ranks shown once, with the ranks and an exact count.

The controller scripts run in their own processes (the settings are read when their
runtime starts); their actors print through the ordinary prefixing of worker output,
from local workers and from workers behind host agents alike.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actormesh._hosts._aggregate import LineAggregator, format_points

HERE = Path(__file__).resolve().parent

SCRIPT = """
    import sys
    from observe_actors import Trainer
    from actormesh import host_mesh, proc_mesh

    if sys.argv[1] == "hosts":  # two host agents, 4 workers each: output comes as EVENTs
        hosts = host_mesh(2).get()
        procs = hosts.spawn_procs(per_host={"gpus": 4})
    else:
        procs = proc_mesh(gpus=8).get()
    trainers = procs.spawn("trainer", Trainer)
    trainers.say.call("loss 0.31").get()
    trainers.numbered.call(5).get()
    small = proc_mesh(gpus=2).get()
    small.spawn("small", Trainer).say.call("hello").get()
    procs.stop().get()
    small.stop().get()
    if sys.argv[1] == "hosts":
        hosts.shutdown().get()
    print("END")
"""


def run(tmp_path: Path, mode: str, env: dict[str, str] | None = None) -> list[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        timeout=90,
        env={**__import__("os").environ, **(env or {})},
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def numbered_counts(lines: list[str]) -> dict[int, int]:
    """How many ranks each ``line i`` was counted for, from merged and single lines."""
    counts: dict[int, int] = {}
    for line in lines:
        found = re.fullmatch(r"\[trainer \{[^}]*\}\] (?:x(\d+) )?line (\d)", line)
        if found:
            i = int(found.group(2))
            counts[i] = counts.get(i, 0) + int(found.group(1) or 1)
    return counts


@pytest.mark.parametrize("mode", ["local", "hosts"])
def test_identical_lines_of_a_large_mesh_are_shown_once_with_exact_counts(
    tmp_path: Path, mode: str
) -> None:
    # A window longer than the script: lines wait until their mesh stops (which writes
    # them), so the eight ranks' lines meet whenever each arrives. With the default
    # 0.25 s, a loaded machine could spread them over two windows.
    lines = run(tmp_path, mode, {"ACTORMESH_OUTPUT_WINDOW": "300"})
    if mode == "local":
        assert "[trainer {gpus=0..7}] x8 loss 0.31" in lines
    else:
        assert "[trainer {hosts=0..1, gpus=0..3}] x8 loss 0.31" in lines
    assert numbered_counts(lines) == {i: 8 for i in range(5)}  # nothing lost, nothing twice
    # Small meshes print as they always did.
    assert "[small {gpus=0}] hello" in lines and "[small {gpus=1}] hello" in lines
    assert lines[-1] == "END"


def test_aggregation_can_be_turned_off(tmp_path: Path) -> None:
    lines = run(tmp_path, "local", {"ACTORMESH_OUTPUT_AGGREGATE": "0"})
    assert sorted(line for line in lines if line.endswith("loss 0.31")) == [
        f"[trainer {{gpus={rank}}}] loss 0.31" for rank in range(8)
    ]


def test_each_ranks_order_is_kept_and_repeats_count_twice(capsys) -> None:
    async def main() -> None:
        lines = LineAggregator(asyncio.get_running_loop(), above=1, window=0.05)
        lines.declare("m", ("r",), (3,))
        for text in (
            "[m {r=0}] A\n[m {r=0}] B\n",
            "[m {r=1}] B\n[m {r=1}] A\n",  # rank 1 prints them the other way round
            "[m {r=2}] A\n[m {r=2}] A\n",  # and rank 2 twice the same
            "plain line\n",
        ):
            lines.feed(text[:4], "stdout", text)
        lines.feed("x", "stdout", "[m {r=0}] unfini")
        lines.end("x")
        await asyncio.sleep(0.2)  # past the window: the timer writes everything

    asyncio.run(main())
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "[m {r=0,2}] x2 A",
        "[m {r=0..1}] x2 B",
        "[m {r=1..2}] x2 A",
        "plain line",
        "[m {r=0}] unfini",
    ]


def test_rank_sets_are_boxes_or_flat_ranks() -> None:
    assert format_points(["gpus=0", "gpus=1", "gpus=3"], None) == "{gpus=0..1,3}"
    shape = (("dp", "tp"), (2, 2))
    assert format_points(["dp=0, tp=0", "dp=1, tp=0"], shape) == "{dp=0..1, tp=0}"
    assert format_points(["dp=0, tp=0", "dp=1, tp=1"], shape) == "{ranks 0,3}"
