"""Monarch's module paths (``monarch.proc_mesh``, ``monarch.actor_mesh``, ``monarch.actor``)
have actormesh twins holding the very same objects, so its programs need only their
imports changed; importing them leaves ``actormesh.proc_mesh`` and
``actormesh.actor_mesh`` the functions they are."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import actormesh


@pytest.mark.parametrize("name", ["actormesh.proc_mesh", "actormesh.actor_mesh", "actormesh.actor"])
def test_every_name_is_the_object_actormesh_exports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__
    for exported in module.__all__:
        assert getattr(module, exported) is getattr(actormesh, exported), exported


def test_importing_the_twins_keeps_the_package_functions() -> None:
    # A fresh interpreter: the order of imports is the one a Monarch program has.
    code = (
        "from actormesh.proc_mesh import proc_mesh, ProcMesh\n"
        "from actormesh.actor_mesh import Actor, endpoint, current_rank\n"
        "import actormesh, inspect\n"
        "assert inspect.isfunction(actormesh.proc_mesh), actormesh.proc_mesh\n"
        "assert inspect.isfunction(actormesh.actor_mesh), actormesh.actor_mesh\n"
        "assert actormesh.proc_mesh is proc_mesh\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
