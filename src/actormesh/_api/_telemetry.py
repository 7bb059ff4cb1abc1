"""Monarch's telemetry names: ``get_meter``, ``span`` and ``traced``.

With OpenTelemetry installed (``actormesh[otel]``) they are OpenTelemetry's: a meter
named ``actormesh`` from the process' meter provider, and spans of the tracer named
``actormesh`` that join the trace of the call running (see ``actormesh._core._otel``:
an actor's endpoint runs inside its call's span when ``Config.otel`` is on). What they
record goes wherever the process' providers send it (nowhere until the program, or
``ACTORMESH_OTEL=otlp``, installs the SDK's). Without OpenTelemetry they record
nothing, as before, and import nothing.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

__all__ = ["get_meter", "span", "traced"]

P = ParamSpec("P")
T = TypeVar("T")

_found: dict[str, Any] = {}


def _opentelemetry(part: str) -> Any:
    """``opentelemetry.<part>``, or ``None`` when OpenTelemetry is not installed (looked
    up once)."""
    if part not in _found:
        try:
            _found[part] = importlib.import_module(f"opentelemetry.{part}")
        except ImportError:
            _found[part] = None
    return _found[part]


class _Instrument:
    """A meter instrument that records nothing."""

    def add(self, *args: Any, **kwargs: Any) -> None:
        pass

    record = add
    set = add


class _Meter:
    """A meter whose instruments record nothing (OpenTelemetry is not installed)."""

    def __getattr__(self, name: str) -> Callable[..., _Instrument]:
        if name.startswith("create_"):
            return lambda *args, **kwargs: _Instrument()
        raise AttributeError(name)


def get_meter() -> Any:
    """The process' meter (Monarch's ``get_meter()``): OpenTelemetry's meter
    ``actormesh`` when it is installed, else one whose instruments record nothing."""
    metrics = _opentelemetry("metrics")
    return metrics.get_meter("actormesh") if metrics is not None else _Meter()


@contextlib.contextmanager
def span(name: str) -> Iterator[Any]:
    """A span named ``name`` around the block, child of the current one (in an actor,
    of its call's); yields the OpenTelemetry span, or ``None`` without OpenTelemetry."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"span: name must be a non-empty str, not {name!r}")
    trace = _opentelemetry("trace")
    if trace is None:
        yield None
        return
    with trace.get_tracer("actormesh").start_as_current_span(name) as current:
        yield current


def traced(fn: Callable[P, T] | None = None, *, name: str | None = None) -> Any:
    """Run a function (``def`` or ``async def``) inside a ``span`` named ``name`` (its
    ``__name__`` by default); bare (``@traced``) or with ``name``, as in Monarch."""

    def decorate(function: Callable[P, T]) -> Callable[P, T]:
        span_name = name if name is not None else function.__name__
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                with span(span_name):
                    return await function(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            with span(span_name):
                return function(*args, **kwargs)

        return run

    return decorate(fn) if fn is not None else decorate
