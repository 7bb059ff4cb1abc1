"""The runtime is an assembly of parts (docs/architecture.md, "Parts, composed"): the
layer that owns processes plugs its parts into the core runtime and overrides none of
its methods, so what the core does can be read in the core alone."""

from __future__ import annotations

import inspect

import pytest

from actormesh._core import CoreRuntime
from actormesh._hosts import Runtime

pytestmark = pytest.mark.timeout(30)


def test_the_runtime_overrides_no_method_of_the_core_runtime() -> None:
    core = {name for name, _ in inspect.getmembers(CoreRuntime) if not name.startswith("__")}
    overridden = sorted(name for name in vars(Runtime) if name in core)
    assert overridden == [], (
        f"Runtime overrides {overridden} of CoreRuntime: give the core a part to ask "
        "instead (see ProcessOwner in _core/_owner.py)"
    )
