"""The import mapping of the actormesh side (compat/monarch_suite), loaded by every Python.

compat/monarch_suite puts this folder first on ``PYTHONPATH`` of the actormesh side, so
pytest, the subprocesses of ``isolate_in_subprocess`` and actormesh's worker processes
all import it at start-up. It installs a finder for the name ``monarch``:

- the public modules map to actormesh's (``mapping.json``, written beside this file by
  the runner: ``monarch.actor`` is ``actormesh.actor``, ``monarch.rdma``,
  ``monarch.spmd``...); ``import monarch`` gives a module that forwards to actormesh;
- a name imported from an internal module that is, in Monarch, the public object of the
  same name (``monarch._src.actor.host_mesh.this_host``) maps to actormesh's public name;
- every other module of Monarch (``monarch._src``, ``monarch._rust_bindings``,
  ``monarch.config``...) imports, but each of its names is a stand-in
  that raises ``MonarchInternalUsed`` when a test uses it (calls it, reads an attribute,
  checks ``isinstance`` against it). Merely importing or annotating with one is no use.

``monarch.config.get_runtime_config()`` (empty) and ``configure()`` without arguments are
what ``isolate_in_subprocess``, Monarch's test helper, calls around every isolated test:
they are plumbing and do nothing here.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path
from typing import Any

_MAPPING = json.loads((Path(__file__).resolve().parent / "mapping.json").read_text())
_MODULES: dict[str, str] = _MAPPING["modules"]
_ALIASES: dict[str, str] = _MAPPING["aliases"]  # "module:name" -> actormesh.actor name
# (or "job.Name": a name of another public module)
_UNMAPPED: set[str] = set(_MAPPING["unmapped"])


class MonarchInternalUsed(RuntimeError):
    """A test used a Monarch name that has no actormesh counterpart."""


def _used(what: str) -> Any:
    raise MonarchInternalUsed(f"monarch internal used: {what} (no actormesh counterpart)")


class _InternalMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return _used(cls._monarch_name)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _used(f"{cls._monarch_name}.{name}")

    def __instancecheck__(cls, instance: Any) -> bool:
        return bool(_used(cls._monarch_name))

    def __subclasscheck__(cls, subclass: Any) -> bool:
        return bool(_used(cls._monarch_name))

    def __getitem__(cls, item: Any) -> Any:
        return cls  # Generic[...] in an annotation is no use

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return _used(cls._monarch_name)


def _stand_in(module: str, name: str) -> type:
    return _InternalMeta(
        name,
        (Exception,),  # so pytest.raises(X) and `except X` still parse
        {"_monarch_name": f"{module}.{name}", "__module__": module, "__qualname__": name},
    )


def _get_runtime_config() -> dict[str, Any]:
    return {}


def _configure(**settings: Any) -> None:
    if settings:
        _used(f"monarch.config.configure({', '.join(sorted(settings))})")


_PLUMBING = {"monarch.config": {"get_runtime_config": _get_runtime_config, "configure": _configure}}


def _internal_module(name: str) -> types.ModuleType:
    # A plain module with a module-level __getattr__ (PEP 562), not a subclass: pickle
    # and cloudpickle reduce modules by their exact type (by reference, by name).
    module = types.ModuleType(name)

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        alias = _ALIASES.get(f"{name}:{attr}")
        if alias is not None:  # "Name" of actormesh.actor (or actormesh), or "module.Name"
            module_name, _, public = alias.rpartition(".")
            if module_name:
                return getattr(importlib.import_module(f"actormesh.{module_name}"), public)
            face = importlib.import_module("actormesh.actor")
            if not hasattr(face, public):  # a name Monarch keeps out of monarch.actor
                face = importlib.import_module("actormesh")
            return getattr(face, public)
        value = _PLUMBING.get(name, {}).get(attr) or _stand_in(name, attr)
        setattr(module, attr, value)
        return value

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _monarch_module() -> types.ModuleType:
    module = types.ModuleType("monarch")

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if f"monarch.{attr}" in _MODULES or attr in _UNMAPPED:
            return importlib.import_module(f"monarch.{attr}")
        return getattr(importlib.import_module("actormesh"), attr)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _unmapped(fullname: str) -> bool:
    parts = fullname.split(".")
    if parts[1] in _UNMAPPED:
        return True
    return ".".join(parts[:2]) in _MODULES  # a submodule of a public module


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == "monarch":
            module = _monarch_module()
        elif spec.name in _MODULES:
            return importlib.import_module(_MODULES[spec.name])
        else:
            module = _internal_module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "monarch" and not fullname.startswith("monarch."):
            return None
        if fullname == "monarch" or fullname in _MODULES or _unmapped(fullname):
            package = fullname == "monarch" or fullname not in _MODULES
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=package)
        return None  # not a module of Monarch: ModuleNotFoundError, as there


sys.meta_path.insert(0, _Finder())
