"""``import actormesh`` stays cheap: the heavy or optional libraries load only when used.

Checked in a fresh interpreter, since this test process has long imported all of them.
A failure names the chain of actormesh modules that pulled the library in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("cloudpickle", "numpy", "ray", "torch")

# Runs in the child: records, for each heavy library, the actormesh frames on the stack
# when it is first imported, then imports the target and prints what got loaded.
_PROBE = textwrap.dedent(
    """
    import importlib.abc, json, sys, traceback

    heavy = set(sys.argv[1].split(","))
    culprits = {}

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            top = fullname.partition(".")[0]
            if top in heavy and top not in culprits:
                culprits[top] = [
                    f"{frame.filename}:{frame.lineno}"
                    for frame in traceback.extract_stack()
                    if "actormesh" in frame.filename
                ]
            return None  # let the real finders load it

    sys.meta_path.insert(0, Watch())
    exec(sys.argv[2])
    loaded = sorted(m for m in heavy if m in sys.modules)
    print(json.dumps({name: culprits.get(name, []) for name in loaded}))
    """
)


def heavy_modules_loaded_by(statement: str) -> dict[str, list[str]]:
    """Runs ``statement`` in a fresh interpreter; maps each heavy library it loaded to
    the actormesh source lines on the stack when that library was first imported."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(HEAVY), statement],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"{statement!r} failed in a fresh interpreter:\n{proc.stderr}"
    result: dict[str, list[str]] = json.loads(proc.stdout.splitlines()[-1])
    return result


# What a user's program imports first, and what every worker process imports (its entry
# point, and the actor API it serves): none may pull in a heavy library before it is used.
@pytest.mark.parametrize(
    "statement",
    [
        "import actormesh",
        "import actormesh._bootstrap",
        "from actormesh import Actor, endpoint, proc_mesh, this_host",
    ],
)
def test_importing_loads_no_heavy_library(statement: str) -> None:
    loaded = heavy_modules_loaded_by(statement)
    assert not loaded, f"{statement} loaded " + "; ".join(
        f"{name} (via {' <- '.join(reversed(chain)) or 'unknown'})"
        for name, chain in loaded.items()
    )


@pytest.mark.parametrize("library", ["numpy"])
def test_probe_notices_a_heavy_library_being_imported(library: str) -> None:
    assert list(heavy_modules_loaded_by(f"import {library}")) == [library]
