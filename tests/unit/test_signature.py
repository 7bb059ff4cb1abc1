"""The call-site argument check agrees with Python's own binding rules."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actormesh._pure._signature import Arity


class Sample:
    def none(self) -> None: ...
    def two(self, a: int, b: int) -> None: ...
    def default(self, a: int, b: int = 0) -> None: ...
    def star(self, a: int, *rest: int) -> None: ...
    def kwonly(self, a: int, *, key: int, opt: int = 1) -> None: ...
    def anykw(self, a: int, **extra: int) -> None: ...
    def posonly(self, a: int, /, b: int = 2) -> None: ...


METHODS = [getattr(Sample, name) for name in vars(Sample) if not name.startswith("_")]
NAMES = ["a", "b", "key", "opt", "rest", "extra", "zzz"]


def binds(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        inspect.signature(fn).bind(None, *args, **kwargs)
    except TypeError:
        return False
    return True


@given(
    method=st.sampled_from(METHODS),
    count=st.integers(0, 4),
    names=st.lists(st.sampled_from(NAMES), unique=True, max_size=3),
)
def test_the_check_accepts_exactly_what_python_binds(
    method: Any, count: int, names: list[str]
) -> None:
    arity = Arity.of(method)
    assert arity is not None
    args, kwargs = tuple(range(count)), dict.fromkeys(names, 0)
    try:
        arity.check(method.__name__, args, kwargs)
        accepted = True
    except TypeError:
        accepted = False
    assert accepted == binds(method, args, kwargs)


def test_the_error_names_the_endpoint_and_its_signature() -> None:
    arity = Arity.of(Sample.default)
    assert arity is not None
    with pytest.raises(TypeError, match=r"endpoint default\(a: 'int', b: 'int' = 0\) takes"):
        arity.check("default", (1, 2, 3), {})
