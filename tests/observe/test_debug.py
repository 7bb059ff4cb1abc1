"""Remote breakpoints, driven through pseudo-terminals as a person types at them.

``breakpoint()`` in an endpoint opens pdb in the controller's terminal when it has one,
or in ``actormesh debug`` from another terminal; several stopped ranks are attached one
by one; ``continue`` resumes; the other ranks keep answering, and a rank stopped for
longer than the heartbeat timeout is not declared dead.
"""

from __future__ import annotations

import re
import time

import pytest
from observe_support import ACTORMESH, Terminal

HEARTBEAT_TIMEOUT_S = 1.0


def continue_and_read(term: Terminal) -> str:
    """Type ``c``; what the job printed after it, without the "continued" notice: the controller
    writes it from another thread the moment the rank resumes, so it may land anywhere,
    even inside a line the program prints unbuffered (split by ``print``'s own writes)."""
    start = len(term.text)
    term.type("c\n")
    term.expect("DONE")
    after = term.text[start:]
    notice = r"actormesh: trainer \{gpus=\d\} \(rank \d, pid \d+ on \S+\) continued\n"
    assert re.search(notice, after), after
    return re.sub(notice, "", after)


@pytest.mark.parametrize(
    "inherited",
    [{}, {"PYTHONBREAKPOINT": "ray.util.rpdb._driver_set_trace"}],
    ids=["plain", "after-ray-init"],  # ray.init() in the controller sets that
)
def test_a_breakpoint_opens_pdb_in_the_controllers_terminal(
    job_factory, inherited: dict[str, str]
) -> None:
    job = job_factory("breakpoint", 2, "1", terminal=True, env=inherited)
    term = job.terminal
    term.expect(r"actormesh: trainer \{gpus=1\} \(rank 1, pid \d+ on \S+\) stopped at ")
    term.expect(r"observe_actors.py:4[67] in inspect")  # the breakpoint() line, or the next
    term.expect(r"-> return value \+ 1")
    term.expect(r"\(Pdb\) ")
    term.type("p value\n")
    term.expect(r"\b10\b")
    term.expect(r"\(Pdb\) ")
    term.type("where\n")
    term.expect(r"observe_actors.py\(47\)inspect\(\)")
    term.expect(r"\(Pdb\) ")
    printed = continue_and_read(term)
    assert "RESULTS [11]\nOTHERS [0, 1]\nDONE" in printed
    assert term.wait() == 0


def test_actormesh_debug_attaches_to_each_stopped_rank_in_turn(job_factory) -> None:
    job = job_factory("breakpoint", 4, "1,2")
    debug = Terminal([*ACTORMESH, "debug", "--job", str(job.pid)])
    try:
        debug.expect(r"2 ranks are stopped at breakpoints:")
        debug.expect(r"\[1\] trainer \{gpus=\d\}.*\n.*\[2\] trainer \{gpus=\d\}")
        debug.expect(r"attach to which\? \[1-2, Enter: 1\] ")
        debug.type("2\n")
        first = debug.expect(r"attached to trainer \{gpus=(\d)\}").group(1)
        debug.expect(r"\(Pdb\) ")
        debug.type("p value\n")
        debug.expect(rf"\b{int(first) * 10}\b")
        debug.expect(r"\(Pdb\) ")
        debug.type("continue\n")
        debug.expect(rf"trainer \{{gpus={first}\}} .*: continued")
        second = debug.expect(r"attached to trainer \{gpus=(\d)\}").group(1)
        assert {first, second} == {"1", "2"}
        debug.expect(r"\(Pdb\) ")
        debug.type("p value\n")
        debug.expect(rf"\b{int(second) * 10}\b")
        debug.type("c\n")
        debug.expect("no rank of job .* is stopped at a breakpoint; waiting")
        debug.type("\x04")  # Ctrl-D
        assert debug.wait() == 0
    finally:
        debug.close()
    out = job.finish()
    assert "RESULTS [11, 21]" in out
    assert "OTHERS [0, 1, 2, 3]" in out


def test_a_rank_stopped_past_the_heartbeat_timeout_is_not_declared_dead(job_factory) -> None:
    # An async endpoint at a breakpoint blocks its process' event loop: no heartbeats.
    job = job_factory(
        "breakpoint_async",
        2,
        "0",
        env={"ACTORMESH_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S)},
        terminal=True,
    )
    term = job.terminal
    term.expect(r"-> return value \+ 2")
    term.expect(r"\(Pdb\) ")
    # The rank stopped before its prompt appeared here, and stays stopped until "c": from
    # now on it has been stopped at least `stopped` seconds. The person reads the code
    # (each command a round trip) until that is well past the timeout, and the probe
    # interval after it, when a silent rank would be declared dead.
    since = time.monotonic()
    stopped = 0.0
    while stopped <= 2.5 * HEARTBEAT_TIMEOUT_S:
        term.type("l .\n")
        term.expect(r"return value \+ 2")
        term.expect(r"\(Pdb\) ")
        stopped = time.monotonic() - since
    term.type("p value\n")
    term.expect(r"\b0\b")
    assert "RESULTS [2]\nOTHERS [0, 1]\n" in continue_and_read(term)
    assert term.wait() == 0
    assert "stopped answering heartbeats" not in term.text
