"""Stands in for Monarch's tests/rdma_test_utils.py on the actormesh side.

Monarch's ``rdma_backends`` runs a test twice through ``monarch.config``: with
``rdma_disable_ibverbs=True`` (TCP) and with ``False`` (ibverbs, skipped on a host
without an ibverbs device). This does the same with the same test ids; actormesh has one
backend and needs no setting, so the TCP case runs the test as it is.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest

RDMA_BACKENDS: list[str] = ["ibverbs", "tcp"]

_CASES = [
    {"rdma_disable_ibverbs": True, "rdma_allow_tcp_fallback": True},
    {"rdma_disable_ibverbs": False, "rdma_allow_tcp_fallback": False},
]


def skip_if_ibverbs_unavailable() -> None:
    """Skip the running test when this host has no ibverbs device."""
    from monarch.rdma import is_ibverbs_available

    if not is_ibverbs_available():
        pytest.skip("ibverbs backend requested but no ibverbs device on this host")


def rdma_backends(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Parametrize ``fn`` over the two backend cases, with Monarch's ids."""
    signature = inspect.signature(fn)
    overrides = inspect.Parameter("_config_overrides", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    new_signature = signature.replace(parameters=[overrides, *signature.parameters.values()])

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper(_config_overrides: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if not _config_overrides["rdma_disable_ibverbs"]:
                skip_if_ibverbs_unavailable()
            return await fn(*args, **kwargs)

    else:

        @functools.wraps(fn)
        def wrapper(_config_overrides: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if not _config_overrides["rdma_disable_ibverbs"]:
                skip_if_ibverbs_unavailable()
            return fn(*args, **kwargs)

    wrapper.__signature__ = new_signature  # type: ignore[attr-defined]
    ids = ["-".join(f"{k}={v}" for k, v in case.items()) for case in _CASES]
    return pytest.mark.parametrize("_config_overrides", _CASES, ids=ids)(wrapper)
