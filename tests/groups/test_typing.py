"""Issue 6, point 1: endpoints reached through a mesh are typed for mypy.

mypy runs on a small program and must reveal each adverb's future as the endpoint's
return type, and reject a call with an argument of the wrong type.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
from actormesh import Actor, ActorMesh, actor_mesh, endpoint, proc_mesh


class Stepper(Actor):
    @endpoint
    def step(self, x: int) -> float:
        return x / 2

    @endpoint
    async def greet(self, prefix: str) -> str:
        return prefix


async def main() -> None:
    mesh = await actor_mesh(Stepper, shape={"dp": 2})
    reveal_type(mesh.step.call_one(1))
    reveal_type(mesh.greet.choose("a"))
    reveal_type(mesh.step.all(1))
    reveal_type(mesh.step.choose_with(key="lora")(1))
    reveal_type(mesh.with_policy("least_loaded").slice(dp=0).step.call_one(2))
    reveal_type(await mesh.step.call_one(3))
    procs = await proc_mesh(gpus=2)
    spawned = await procs.spawn("s", Stepper)
    reveal_type(spawned.step.call_one(4))
    reveal_type(ActorMesh(Stepper, (), {}, shape=2))
    mesh.step.call_one("not an int")
"""


@pytest.mark.timeout(180)
def test_mypy_types_adverbs_as_the_endpoint_return_type(tmp_path: Path) -> None:
    program = tmp_path / "typed_program.py"
    program.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(REPO / ".mypy_cache"),
            "--config-file",
            str(REPO / "pyproject.toml"),
            str(program),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=170,
    )
    lines = done.stdout.splitlines()
    notes = [line.split("Revealed type is ", 1)[1] for line in lines if "Revealed type" in line]
    assert notes == [
        '"actormesh._api._future.Future[float]"',
        '"actormesh._api._future.Future[str]"',
        '"actormesh._api._future.Future[actormesh._shape.ValueMesh[float]]"',
        '"actormesh._api._future.Future[float]"',
        '"actormesh._api._future.Future[float]"',
        '"float"',
        '"actormesh._api._future.Future[float]"',
        '"actormesh._api._actor_mesh.ActorMesh[typed_program.Stepper]"',
    ], done.stdout
    errors = [line for line in lines if ": error:" in line]
    assert len(errors) == 1, done.stdout
    assert 'incompatible type "str"; expected "int"' in errors[0]
