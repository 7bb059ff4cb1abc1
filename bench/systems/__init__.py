"""The systems the suite compares, by name; importing this loads none of them.

Each entry names the module that adapts the system (``bench.systems.<name>_sys``,
which imports the system itself and is only ever imported in a benchmark worker)
and the import that tells whether the system is installed at all.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.systems.base import System

__all__ = ["SYSTEMS", "Entry", "entry"]


@dataclass(frozen=True)
class Entry:
    """A compared system: result key, column title, adapter module, installed check."""

    name: str
    label: str
    module: str
    requires: str
    """Top-level module whose presence means the system is installed."""
    distribution: str | None
    """Package whose version is reported (None: report the Python version)."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in the benchmark worker's environment (and so in every process it starts)."""

    def installed(self) -> bool:
        """Whether ``requires`` can be imported in this interpreter."""
        try:
            return importlib.util.find_spec(self.requires) is not None
        except (ImportError, ValueError):
            return False

    def version(self) -> str:
        """The version of the system (call where it is installed)."""
        from importlib.metadata import PackageNotFoundError, version

        if self.distribution is None:
            import sys

            return f"python {sys.version.split()[0]}"
        try:
            return version(self.distribution)
        except PackageNotFoundError:
            mod = importlib.import_module(self.requires)
            return str(getattr(mod, "__version__", "source tree"))

    def load(self) -> System:
        """Import the adapter and return a fresh `System` (imports the system itself)."""
        module = importlib.import_module(self.module)
        system: System = module.SYSTEM()
        return system


SYSTEMS: tuple[Entry, ...] = (
    Entry("actormesh", "actormesh", "bench.systems.actormesh_sys", "actormesh", "actormesh"),
    # The same library forced onto its pure-Python per-message path and fresh-interpreter
    # spawns: what a machine without a C compiler gets.
    Entry(
        "actormesh_pure",
        "actormesh (pure Python)",
        "bench.systems.actormesh_sys",
        "actormesh",
        "actormesh",
        env={"ACTORMESH_NO_EXTENSIONS": "1"},
    ),
    Entry("monarch", "Monarch", "bench.systems.monarch_sys", "monarch", "torchmonarch"),
    Entry("ray", "Ray", "bench.systems.ray_sys", "ray", "ray"),
    Entry("torchrpc", "torch.rpc", "bench.systems.torchrpc_sys", "torch", "torch"),
    Entry("floor", "floor", "bench.systems.floor_sys", "socket", None),
)

_BY_NAME = {e.name: e for e in SYSTEMS}


def entry(name: str) -> Entry:
    """The system called ``name``.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown system {name!r}; known: {', '.join(_BY_NAME)}") from None
