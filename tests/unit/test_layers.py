"""Each module imports only from its own layer or below, and another package's code only
through that package's face, its ``__init__`` (docs/architecture.md, "Layers").

The check reads the source with ``ast``; nothing is imported. Imports inside functions
count (a lazy import still couples the layers); imports under ``if TYPE_CHECKING:`` do
not count for the layers, since they never run, but do for the faces: a type named from
a private module is a reach-in all the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "actormesh"
SRC = Path(__file__).resolve().parents[2] / "src" / PACKAGE

# Top-level names under actormesh/ and their layer (docs/architecture.md, "Layers");
# anything else at top level is public API beside the package root (the Monarch and Ray
# faces).
LAYERS: dict[str, float] = {
    "_shape": 0,
    "_exceptions": 0,
    "_config": 0,
    "_pure": 0,
    "_transport": 1,
    "_core": 2,
    "_hosts": 3,
    "_template_start": 3,  # the fork server's launch, importable without the runtime
    "_api": 4,
    "_observe": 4,  # the controller's side of top/stacks/debug: meshes and the runtime
    "_bootstrap": 4,  # the worker process' entry point: a runtime and the actor layer
    "allocators": 5,
    "job": 5,
    "rpc": 5,
    "torch": 5,
    "testing": 5,
    "_cli": 5,
    "__main__": 5,  # ``python -m actormesh``: the command line's entry point
}
# actormesh/__init__.py re-exports the actor API, so it sits just above layer 4: it may
# import layers <= 4, and only layer 5 may import it (anything lower would be a cycle).
# The public faces beside it (actormesh.actor, .proc_mesh, .actor_mesh, .ray) too.
ROOT_LAYER = 4.5
DEFAULT_LAYER = ROOT_LAYER


@dataclass(frozen=True)
class Violation:
    """One import that reaches above the importing module's layer."""

    module: str
    line: int
    imported: str
    module_layer: float
    imported_layer: float

    def __str__(self) -> str:
        return (
            f"{self.module} (layer {self.module_layer:g}) line {self.line} imports "
            f"{self.imported} (layer {self.imported_layer:g})"
        )


def layer_of(module: str) -> float:
    """The layer of a dotted module name inside the package."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        raise ValueError(f"{module} is not inside {PACKAGE}")
    if len(parts) == 1:
        return ROOT_LAYER
    return LAYERS.get(parts[1], DEFAULT_LAYER)


def module_name(path: Path, root: Path = SRC) -> str:
    """The dotted name of the module at ``path`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(
    nodes: Iterable[ast.AST], type_checking: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """All import statements in ``nodes``, at any depth, except under ``if TYPE_CHECKING:``
    (unless ``type_checking``)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            found.extend(_runtime_imports(node.orelse))  # the else branch does run
        else:
            found.extend(_runtime_imports(ast.iter_child_nodes(node), type_checking))
    return found


def imported_modules(
    source: str, module: str, *, is_package: bool, exists: set[str], type_checking: bool = False
) -> list[tuple[int, str]]:
    """The package-internal modules that ``source`` imports at run time, with line numbers.

    Args:
        source: Python source of the module.
        module: Its dotted name, used to resolve relative imports.
        is_package: Whether it is a package's ``__init__`` (changes what ``.`` means).
        exists: Dotted names of all modules in the package, to tell
            ``from actormesh import _shape`` (a module) from ``from actormesh import Actor``
            (a name defined by the package's ``__init__``).
        type_checking: Count the imports under ``if TYPE_CHECKING:`` too.
    """
    package = module if is_package else module.rpartition(".")[0]
    result: list[tuple[int, str]] = []
    for node in _runtime_imports(ast.parse(source).body, type_checking):
        if isinstance(node, ast.Import):
            result.extend(
                (node.lineno, alias.name)
                for alias in node.names
                if alias.name.split(".")[0] == PACKAGE
            )
            continue
        if node.level:
            base_parts = package.split(".")
            drop = node.level - 1
            if drop >= len(base_parts):
                raise ValueError(f"{module} line {node.lineno}: relative import beyond the top")
            base = ".".join(base_parts[: len(base_parts) - drop])
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        if target.split(".")[0] != PACKAGE:
            continue
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            result.append((node.lineno, submodule if submodule in exists else target))
    return result


def find_violations(root: Path = SRC) -> list[Violation]:
    """Checks every module under ``root`` and returns the imports that break the layers."""
    paths = sorted(root.rglob("*.py"))
    names = {module_name(p, root): p for p in paths}
    exists = set(names)
    violations = []
    for name, path in names.items():
        own = layer_of(name)
        # The package's __init__ and the faces beside it may import up to layer 4, not
        # each other's ROOT_LAYER: that only matters as a target.
        allowed = 4 if own == ROOT_LAYER else own
        for line, imported in imported_modules(
            path.read_text(encoding="utf-8"),
            name,
            is_package=path.name == "__init__.py",
            exists=exists,
        ):
            if imported == name:
                continue
            theirs = layer_of(imported)
            if theirs > allowed:
                violations.append(Violation(name, line, imported, own, theirs))
    return violations


# Imports of another package's private module that are still allowed, each with why; the
# list only shrinks (a new reach-in means exporting the name from the package's face).
REACH_INS_ALLOWED: dict[tuple[str, str], str] = {}


def find_reach_ins(root: Path = SRC) -> list[str]:
    """Imports of a package's private module (``actormesh._core._runtime``) from a module
    outside that package, not in ``REACH_INS_ALLOWED``."""
    paths = sorted(root.rglob("*.py"))
    names = {module_name(p, root): p for p in paths}
    exists = set(names)
    packages = {name for name, path in names.items() if path.name == "__init__.py"}
    found = []
    for name, path in names.items():
        for line, imported in imported_modules(
            path.read_text(encoding="utf-8"),
            name,
            is_package=path.name == "__init__.py",
            exists=exists,
            type_checking=True,
        ):
            package = imported.rpartition(".")[0]
            while package and package not in packages:  # the innermost package holding it
                package = package.rpartition(".")[0]
            inside = name == package or name.startswith(package + ".")
            private = imported != package and imported[len(package) + 1 :].startswith("_")
            if package and private and not inside and (name, imported) not in REACH_INS_ALLOWED:
                found.append(f"{name} line {line} imports {imported}")
    return found


def test_source_tree_has_modules_to_check() -> None:
    assert SRC.is_dir(), f"{SRC} is missing"
    assert (SRC / "__init__.py").is_file(), f"{SRC / '__init__.py'} is missing"


def test_other_packages_import_a_package_only_through_its_face() -> None:
    reach_ins = find_reach_ins()
    assert not reach_ins, (
        "imports of another package's private module (export the name from that package's "
        "__init__ and import it from there):\n" + "\n".join(f"  {r}" for r in reach_ins)
    )


def test_every_module_imports_only_from_its_layer_or_below() -> None:
    violations = find_violations()
    assert not violations, "imports that break the layering (docs/architecture.md, 'Layers'):\n" + (
        "\n".join(f"  {v}" for v in violations)
    )


# The checker itself: each case would let a real violation through if it regressed.


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / PACKAGE
    for rel in [
        "__init__.py",
        "_shape.py",
        "_api/__init__.py",
        "_api/_actor.py",
        "_hosts/__init__.py",
        "_core/__init__.py",
        "_core/_runtime.py",
        "_transport/__init__.py",
        "rpc/__init__.py",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("", encoding="utf-8")
    return root


def _write(root: Path, rel: str, source: str) -> None:
    (root / rel).write_text(source, encoding="utf-8")


def _found(root: Path) -> list[str]:
    return [str(v) for v in find_violations(root)]


def test_checker_accepts_imports_from_lower_layers(tree: Path) -> None:
    _write(tree, "_api/_actor.py", "from .._core import _runtime\nfrom actormesh._shape import X\n")
    _write(tree, "_core/_runtime.py", "from .. import _shape\nfrom .._transport import T\n")
    _write(tree, "rpc/__init__.py", "from actormesh import Actor\nfrom .._api._actor import A\n")
    _write(tree, "__init__.py", "from ._api._actor import A\n")
    assert _found(tree) == []


def test_checker_reports_absolute_import_from_a_higher_layer(tree: Path) -> None:
    _write(tree, "_shape.py", "import os\n\nimport actormesh._core._runtime\n")
    assert _found(tree) == [
        "actormesh._shape (layer 0) line 3 imports actormesh._core._runtime (layer 2)"
    ]


def test_checker_reports_relative_import_from_a_higher_layer(tree: Path) -> None:
    _write(tree, "_core/_runtime.py", "def f():\n    from .._hosts import Runtime\n")
    assert _found(tree) == [
        "actormesh._core._runtime (layer 2) line 2 imports actormesh._hosts (layer 3)"
    ]


def test_checker_reports_layer_four_importing_the_package_root(tree: Path) -> None:
    _write(tree, "_api/_actor.py", "from actormesh import Actor\n")
    assert _found(tree) == ["actormesh._api._actor (layer 4) line 1 imports actormesh (layer 4.5)"]


def test_checker_reports_package_root_importing_layer_five(tree: Path) -> None:
    _write(tree, "__init__.py", "from .rpc import rpc_sync\n")
    assert _found(tree) == ["actormesh (layer 4.5) line 1 imports actormesh.rpc (layer 5)"]


def test_checker_counts_unknown_top_level_modules_as_public_faces(tree: Path) -> None:
    _write(tree, "new_face.py", "")
    _write(tree, "_api/_actor.py", "from actormesh.new_face import N\n")
    assert _found(tree) == [
        "actormesh._api._actor (layer 4) line 1 imports actormesh.new_face (layer 4.5)"
    ]


def test_checker_ignores_type_checking_imports_but_not_their_else_branch(tree: Path) -> None:
    _write(
        tree,
        "_shape.py",
        "import typing\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ._api._actor import A\n"
        "if typing.TYPE_CHECKING:\n"
        "    import actormesh.rpc\n"
        "else:\n"
        "    from ._core import _runtime\n",
    )
    assert _found(tree) == [
        "actormesh._shape (layer 0) line 8 imports actormesh._core._runtime (layer 2)"
    ]


def test_faces_checker_reports_a_reach_into_another_packages_private_module(tree: Path) -> None:
    _write(tree, "rpc/__init__.py", "from .._api._actor import A\nfrom .._api import B\n")
    _write(
        tree,
        "__init__.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from actormesh._core._runtime import R\n",
    )
    _write(tree, "_api/__init__.py", "from ._actor import A\n")  # its own package: fine
    assert find_reach_ins(tree) == [
        "actormesh line 3 imports actormesh._core._runtime",
        "actormesh.rpc line 1 imports actormesh._api._actor",
    ]


def test_faces_checker_reports_a_private_module_imported_by_name(tree: Path) -> None:
    _write(tree, "rpc/__init__.py", "from .._core import _runtime\n")
    assert find_reach_ins(tree) == ["actormesh.rpc line 1 imports actormesh._core._runtime"]
