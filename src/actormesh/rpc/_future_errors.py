"""Failing the ``torch.futures.Future`` of an RPC so that ``torch.futures.wait_all`` stops
at it, as it stops at torch's own.

torch's Python ``Future.set_exception`` completes the future with the exception as its
*value* (``wait()`` raises it through an unwrap function), and ``wait_all`` and
``collect_all``, which stop at the first future in torch's C++ error state, then wait
for all the others. torch's RPC futures are in that state when they fail. ``fail``
puts an actormesh RPC's future there too, through a small compiled helper
(``_cfutures.cpp``, built against the installed torch by ``scripts/bootstrap``), and
the exception raised by ``wait()``, ``value()`` and ``wait_all`` is the very exception
object, type and all. Without the helper (not built, or built for another torch) the
future fails as before: typed, but ``wait_all`` waits for every future.

``python -m actormesh.rpc._future_errors build`` builds the helper in place.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from .._config import extensions_disabled

__all__ = ["compiled", "fail"]

log = logging.getLogger("actormesh.rpc")

_compiled: Any = None
if not extensions_disabled():  # (ACTORMESH_NO_EXTENSIONS: the fallback, for its tests)
    try:
        from . import _cfutures as _compiled  # type: ignore[attr-defined,no-redef]
    except Exception:  # not built, or built against another torch (undefined symbols)
        _compiled = None


def compiled() -> bool:
    """Whether failed futures stop ``wait_all`` (the compiled helper is in use)."""
    return _compiled is not None


def fail(future: Any, error: BaseException) -> None:
    """Complete ``future`` (a ``torch.futures.Future``) with ``error``."""
    if _compiled is not None and isinstance(error, Exception):
        _compiled.set_exception(future, error)
    else:
        future.set_exception(error)


def build() -> int:
    """Build ``_cfutures`` next to this module, against the installed torch; 0 on success."""
    from setuptools import setup  # type: ignore[import-untyped]
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    here = Path(__file__).resolve().parent
    extension = CppExtension(  # type: ignore[no-untyped-call]
        "actormesh.rpc._cfutures", [str(here / "_cfutures.cpp")], extra_compile_args=["-O2"]
    )
    build_root = here.parents[2] / "build" / "cfutures"
    setup(
        name="actormesh-cfutures",
        ext_modules=[extension],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},  # type: ignore[no-untyped-call]
        script_args=[
            "build_ext",
            "--inplace",
            "--build-temp",
            str(build_root / "temp"),
            "--build-lib",
            str(build_root / "lib"),
        ],
        package_dir={"": str(here.parents[1])},
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        print("usage: python -m actormesh.rpc._future_errors build", file=sys.stderr)
        sys.exit(2)
    sys.exit(build())
