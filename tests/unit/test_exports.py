"""The public surface: what ``actormesh`` and its public subpackages export, and how.

Public modules are found on disk (every module under ``src/actormesh`` with no
underscore-prefixed part in its name), so a new public subpackage is checked as soon as
it exists, and a public module that fails to import fails here rather than being skipped.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from types import ModuleType

import pytest

PACKAGE = "actormesh"
SRC = Path(__file__).resolve().parents[2] / "src" / PACKAGE


def public_module_names(root: Path = SRC) -> list[str]:
    """Dotted names of the public modules under ``root``, the package itself first."""
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not any(part.startswith("_") for part in parts):
            names.append(".".join(parts))
    return sorted(names, key=lambda name: (name != PACKAGE, name))


PUBLIC_MODULES = public_module_names() or [PACKAGE]


def _exports(module_name: str) -> tuple[ModuleType, list[str]]:
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module_name} has no __all__"
    return module, list(exported)


def _resolve(dotted_module: str, qualname: str) -> object:
    obj: object = importlib.import_module(dotted_module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_all_is_sorted_and_free_of_duplicates(module_name: str) -> None:
    _, exported = _exports(module_name)
    assert exported == sorted(exported), f"{module_name}.__all__ is not sorted"
    duplicates = sorted({name for name in exported if exported.count(name) > 1})
    assert not duplicates, f"{module_name}.__all__ lists {duplicates} more than once"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_exported_name_resolves(module_name: str) -> None:
    module, exported = _exports(module_name)
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names {missing}, which the module lacks"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_exported_classes_and_functions_name_a_module_they_are_found_in(
    module_name: str,
) -> None:
    # Pickle and tracebacks find an object by __module__ + __qualname__, so that pair must
    # lead back to the very object, inside actormesh.
    module, exported = _exports(module_name)
    problems = []
    for name in exported:
        obj = getattr(module, name, None)  # a missing name fails the test above
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        home = obj.__module__
        if home != PACKAGE and not home.startswith(f"{PACKAGE}."):
            problems.append(f"{name}: __module__ is {home!r}, outside {PACKAGE}")
            continue
        try:
            found = _resolve(home, obj.__qualname__)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{name}: {home}.{obj.__qualname__} does not resolve ({exc})")
            continue
        if found is not obj:
            problems.append(f"{name}: {home}.{obj.__qualname__} is a different object")
    assert not problems, f"{module_name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_exported_exceptions_report_a_public_module(module_name: str) -> None:
    # Users catch and read `actormesh.ActorError`, not `actormesh._exceptions.ActorError`;
    # a subpackage's exceptions may name it or any public package above it.
    parts = module_name.split(".")
    allowed = {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
    module, exported = _exports(module_name)
    wrong = {
        name: obj.__module__
        for name in exported
        if inspect.isclass(obj := getattr(module, name, None))
        and issubclass(obj, BaseException)
        and obj.__module__ not in allowed
    }
    assert not wrong, (
        f"{module_name} exports exceptions whose __module__ is not one of {sorted(allowed)}: "
        f"{wrong}"
    )


def unsorted_all_lists(root: Path = SRC) -> list[str]:
    """Modules under ``root`` whose literal ``__all__`` is not sorted() or repeats a name.

    Reads the source, so private modules are covered without importing them.
    """
    problems = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and any(
                    isinstance(t, ast.Name) and t.id == "__all__"
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                )
                and isinstance(node.value, ast.List | ast.Tuple)
            ):
                continue
            names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            if names != sorted(set(names)):
                where = path.relative_to(root.parent)
                problems.append(f"{where}:{node.lineno} __all__ should be {sorted(set(names))}")
    return problems


def test_every_module_all_is_sorted() -> None:
    problems = unsorted_all_lists()
    assert not problems, "unsorted __all__:\n  " + "\n  ".join(problems)


def test_unsorted_all_check_reports_constants_and_numbers_in_plain_order(
    tmp_path: Path,
) -> None:
    root = tmp_path / PACKAGE
    root.mkdir()
    (root / "_good.py").write_text('__all__ = ["Actor", "Item10", "Item2", "VERSION", "call"]\n')
    (root / "_bad.py").write_text('x = 1\n__all__: list[str] = ["b", "a"]\n')
    assert unsorted_all_lists(root) == ["actormesh/_bad.py:2 __all__ should be ['a', 'b']"]


def test_public_modules_are_found_on_disk() -> None:
    assert public_module_names()[:1] == [PACKAGE], f"no {SRC / '__init__.py'}"


def test_public_module_discovery_skips_private_parts(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    for rel in [
        "__init__.py",
        "_core/__init__.py",
        "_core/runtime.py",
        "_shape.py",
        "rpc/__init__.py",
        "rpc/autograd.py",
        "rpc/_agent.py",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).touch()
    assert public_module_names(root) == ["actormesh", "actormesh.rpc", "actormesh.rpc.autograd"]
