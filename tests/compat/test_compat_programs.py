"""Every conformance program in ``compat/`` runs on actormesh, imports rewritten.

The programs are written in Monarch's and the Ray ActorMesh proposal's own spelling;
``compat.run`` rewrites their import lines (and nothing else) and runs them in a fresh
interpreter, as ``scripts/compat`` does (which also runs them on the real peers). One
test per program; each program asserts its own results and exits 0.

``KNOWN_DIFFERENCES`` lists the programs that fail on actormesh on purpose, each for one
documented difference from the peer (docs/from-monarch.md, "What differs"), with the
error that the difference must produce. Such a program holds that one check only, so
the other programs are enforced in full; its test asserts that it fails with exactly
that error, and fails when it passes or fails any other way (remove the entry then).
"""

from __future__ import annotations

import re

import pytest
from compat.run import (
    ONLY_MARK,
    REWRITES,
    Program,
    UnmappedImport,
    discover,
    rewrite,
    run_on_actormesh,
)

# Each program finishes in well under 30 s here; this is the hang guard.
PROGRAM_TIMEOUT_S = 90.0

KNOWN_DIFFERENCES: dict[str, tuple[str, str]] = {}

PROGRAMS = [*discover("monarch"), *discover("ray")]


def _param(program: Program) -> object:
    marks = [pytest.mark.slow]
    if program.peer == "ray":
        marks.append(pytest.mark.ray)
    return pytest.param(program, id=program.name, marks=marks)


@pytest.mark.timeout(PROGRAM_TIMEOUT_S + 60)
@pytest.mark.parametrize("program", [_param(p) for p in PROGRAMS])
def test_program_runs_on_actormesh(program: Program) -> None:
    outcome = run_on_actormesh(program, timeout=PROGRAM_TIMEOUT_S)
    summary = (
        f"{program.name} {outcome.status} (exit code {outcome.returncode}, "
        f"{outcome.seconds:.1f} s):\n{outcome.output}"
    )
    if program.name in KNOWN_DIFFERENCES:
        why, error = KNOWN_DIFFERENCES[program.name]
        assert outcome.status == "fail", (
            f"known difference ({why}) no longer shows: remove it from KNOWN_DIFFERENCES "
            f"and docs/from-monarch.md if that is intended. {summary}"
        )
        assert re.search(error, outcome.output), (
            f"expected the documented difference ({why}), matching {error!r}; {summary}"
        )
    else:
        assert outcome.ok, summary
    assert not outcome.leftovers, f"{program.name} left processes behind: {outcome.leftovers}"


def test_known_differences_name_real_programs() -> None:
    assert set(KNOWN_DIFFERENCES) <= {p.name for p in PROGRAMS}


def test_both_peers_have_programs_and_some_are_actormesh_only() -> None:
    peers = {p.peer for p in PROGRAMS}
    assert peers == {"monarch", "ray"}
    assert any(p.actormesh_only for p in PROGRAMS if p.peer == "ray")
    assert not any(p.actormesh_only for p in PROGRAMS if p.peer == "monarch")


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_program_is_in_its_peers_spelling(program: Program) -> None:
    source = program.path.read_text()
    assert not re.search(r"^\s*(from|import)\s+actormesh\b", source, re.M)
    peer_import = {"monarch": r"^\s*(from|import)\s+monarch\.", "ray": r"^from ray\.actor_mesh "}
    assert re.search(peer_import[program.peer], source, re.M)
    rewritten = rewrite(source, program.peer)
    changed = [
        (old, new)
        for old, new in zip(source.splitlines(), rewritten.splitlines(), strict=True)
        if old != new
    ]
    assert changed, "nothing was rewritten"
    for old, new in changed:
        assert re.match(r"\s*(from|import)\s", old) and "actormesh" in new, (old, new)
    if program.actormesh_only:
        assert source.splitlines()[0] == ONLY_MARK


def test_rewrite_table() -> None:
    source = (
        "import os\n"
        "from monarch.actor import Actor, endpoint\n"
        "from monarch.rdma import RDMABuffer\n"
        "from monarch.job import ProcessJob\n"
        "import monarch.actor\n"
        "import monarch.spmd as spmd\n"
        "monarch.actor.unhandled_fault_hook = print\n"
    )
    assert rewrite(source, "monarch") == (
        "import os\n"
        "from actormesh.actor import Actor, endpoint\n"
        "from actormesh.rdma import RDMABuffer\n"
        "from actormesh.job import ProcessJob\n"
        "import actormesh as monarch, actormesh.actor\n"
        "import actormesh.spmd as spmd\n"
        "monarch.actor.unhandled_fault_hook = print\n"
    )
    ray_source = "import ray\nfrom ray.actor_mesh import ActorMesh, method\nray.get([])\n"
    assert rewrite(ray_source, "ray") == (
        "import ray\nfrom actormesh.ray import ActorMesh, method\nray.get([])\n"
    )
    assert set(REWRITES) == {"monarch", "ray"}


@pytest.mark.parametrize(
    ("peer", "line"),
    [
        ("monarch", "from monarch import fetch_shard\n"),
        ("monarch", "from monarch.tools import commands\n"),
        ("ray", "import ray.actor_mesh\n"),
    ],
)
def test_an_import_the_table_does_not_map_is_refused(peer: str, line: str) -> None:
    with pytest.raises(UnmappedImport):
        rewrite(line, peer)
