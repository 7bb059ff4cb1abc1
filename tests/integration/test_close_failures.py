"""What fails while an actor closes (its ``__cleanup__``) reaches the user's terminal:
nobody waits for an answer then, so an error would otherwise vanish."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
from actormesh.actor import Actor, endpoint, this_host

class A(Actor):
    @endpoint
    {kind}def ok(self):
        return 1

    {kind}def __cleanup__(self, exc):
        raise RuntimeError("cleanup exploded")

procs = this_host().spawn_procs(per_host={{"gpus": 1}})
mesh = procs.spawn("a", A)
assert list(mesh.ok.call().get(timeout=60).values()) == [1]
mesh.stop().get(timeout=30)
procs.stop().get(timeout=30)
print("done")
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["", "async "])
def test_an_exception_of_cleanup_is_printed_with_the_actor_that_raised_it(kind: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(kind=kind)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout
    output = done.stdout + done.stderr
    assert "actormesh: __cleanup__ of actor A of mesh 'a' at {'gpus': 0/1} raised:" in output
    assert "RuntimeError: cleanup exploded" in output
