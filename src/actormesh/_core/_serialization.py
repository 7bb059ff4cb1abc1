"""Serialization: pickle protocol 5 with out-of-band buffers, code by value when needed.

``dumps`` returns the pickle and the list of large buffers it refers to (numpy arrays,
tensors, ``PickleBuffer``s) without copying them into the pickle; the transport sends them
as separate frame parts and ``loads`` maps them back.

Classes and functions that the receiving process cannot import (defined in ``__main__``,
in a notebook cell, inside a function, lambdas) are pickled by value with cloudpickle,
imported only when such an object is met. Torch tensors are handled by a reducer loaded
only when torch is already imported by the program.
"""

from __future__ import annotations

import collections
import functools
import io
import pickle
import sys
import types
from collections.abc import Iterator
from typing import Any

from .._exceptions import SerializationError

__all__ = ["Pickler", "dumps", "dumps_arguments", "loads"]


def _by_value(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    if module == "__main__" or module == "__mp_main__":
        return True
    qualname = getattr(obj, "__qualname__", "")
    return "<locals>" in qualname or "<lambda>" in qualname


class Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is types.FunctionType or isinstance(obj, type):
            if _by_value(obj):
                return pickle.loads, (_pickled_by_value(obj),)
            return NotImplemented
        if "torch" in sys.modules and kind.__module__.startswith("torch"):
            from ._tensors import reduce_tensor

            return reduce_tensor(obj)
        if kind is memoryview and _contiguous(obj):
            # Out of band like arrays: never copied into the pickle, shared memory when
            # large; it arrives as a view of the received buffer (no copy).
            return _as_memoryview, (pickle.PickleBuffer(obj),)
        if kind is _LargeBytes:
            return obj.kind, (pickle.PickleBuffer(obj.data),)
        return NotImplemented


def _pickled_by_value(obj: Any) -> bytes:
    """``obj`` pickled with cloudpickle, its code keeping the file it came from.

    cloudpickle names the file of every code object it pickles ``<dynamic-code>``; an
    actor defined in the program's ``__main__`` would then show its frames in remote
    tracebacks without a path or a source line. Its own code reducer is kept, with the
    real file name put back.
    """
    stream = io.BytesIO()
    _code_keeping_pickler()(stream, protocol=5).dump(obj)
    return stream.getvalue()


@functools.cache
def _code_keeping_pickler() -> type[pickle.Pickler]:
    import cloudpickle

    table = collections.ChainMap(
        {types.CodeType: _code_reduce_keeping_file}, cloudpickle.Pickler.dispatch_table
    )
    return type("CodeKeepingPickler", (cloudpickle.Pickler,), {"dispatch_table": table})


def _code_reduce_keeping_file(code: types.CodeType) -> Any:
    from cloudpickle import cloudpickle as internals

    rebuild, args = internals._code_reduce(code)
    return rebuild, tuple(code.co_filename if arg == "<dynamic-code>" else arg for arg in args)


# The C pickler writes bytes and bytearray in-band before any hook can see them, so a
# large one passed as an argument or returned is wrapped to travel out of band too.
_LARGE_BYTES = 64 * 1024


class _LargeBytes:
    __slots__ = ("data", "kind")

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.kind = type(data)


def _lift(value: Any) -> Any:
    kind = type(value)
    if (kind is bytes or kind is bytearray) and len(value) >= _LARGE_BYTES:
        return _LargeBytes(value)
    return value


def _contiguous(obj: Any) -> bool:
    return bool(memoryview(obj).c_contiguous)


def _as_memoryview(buffer: Any) -> memoryview:
    return memoryview(buffer).cast("B")


# Values made only of these need no reducer and have no buffers: the C pickler alone.
_PLAIN = frozenset({type(None), bool, int, float, str})


def dumps(obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Pickle ``obj``; returns the pickle and its out-of-band buffers.

    Raises:
        SerializationError: naming the part of ``obj`` that cannot be pickled.
    """
    if type(obj) in _PLAIN:
        return pickle.dumps(obj, 5), []
    obj = _lift(obj)
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    try:
        Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(obj)
    except Exception as error:
        raise SerializationError(_describe_failure(obj, error)) from error
    return stream.getvalue(), buffers


def dumps_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Pickle a call's ``(args, kwargs)``; errors name the argument, e.g. ``args[1]['w']``."""
    plain = _PLAIN
    if all(type(a) in plain for a in args) and all(type(v) in plain for v in kwargs.values()):
        return pickle.dumps((args, kwargs), 5), []
    lifted = (tuple(_lift(a) for a in args), {k: _lift(v) for k, v in kwargs.items()})
    try:
        return dumps(lifted)
    except SerializationError as error:
        for path, value in (*_children(args, "args"), *_children(kwargs, "kwargs")):
            try:
                dumps(value)
            except SerializationError:
                where, leaf = _first_unpicklable(value, path, depth=0)
                cause = error.__cause__ or error
                raise SerializationError(
                    f"cannot pickle {where}: {_short_repr(leaf)} of type "
                    f"{type(leaf).__qualname__} ({type(cause).__name__}: {cause}); "
                    "nothing was sent"
                ) from cause
        raise


def loads(payload: Any, buffers: Any = ()) -> Any:
    """Unpickle what ``dumps`` produced (the buffers in the same order)."""
    return pickle.loads(payload, buffers=buffers)


def _describe_failure(obj: Any, error: Exception) -> str:
    path, leaf = _first_unpicklable(obj, "value", depth=0)
    detail = f"{type(error).__name__}: {error}"
    if leaf is None:
        return f"cannot pickle {path} ({detail})"
    return f"cannot pickle {path}: {_short_repr(leaf)} of type {type(leaf).__qualname__} ({detail})"


def _first_unpicklable(obj: Any, path: str, depth: int) -> tuple[str, Any]:
    """The deepest reachable part of ``obj`` that fails to pickle, and its path."""
    if depth < 8:
        for child_path, child in _children(obj, path):
            try:
                Pickler(io.BytesIO(), protocol=5, buffer_callback=lambda _: None).dump(child)
            except Exception:
                return _first_unpicklable(child, child_path, depth + 1)
    return path, obj


def _children(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"{path}[{key!r}]", value
    elif isinstance(obj, list | tuple | set | frozenset):
        for index, value in enumerate(obj):
            yield f"{path}[{index}]", value
    else:
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            for key, value in state.items():
                yield f"{path}.{key}", value


def _short_repr(obj: Any) -> str:
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__qualname__}>"
    return text if len(text) <= 80 else text[:77] + "..."
