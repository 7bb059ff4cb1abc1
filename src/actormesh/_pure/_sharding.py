"""Dispatch for ``shard``: how call arguments map to the points of a mesh and how
the results combine into one value.

Everything here is pure. A `Dispatch` splits ``(args, kwargs)`` into one
``(args, kwargs)`` per point and collects the resulting `ValueMesh`; the runtime
does the sending. A user's own function in the Ray ActorMesh style, which makes
the calls itself, is wrapped in a `CallbackDispatch` instead.

numpy and torch are never imported here: a value can only be an ndarray or a
tensor if its module is already loaded, so ``sys.modules`` is consulted instead.
"""

from __future__ import annotations

import itertools
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from actormesh._exceptions import DimensionError
from actormesh._shape import Shape, ValueMesh

__all__ = [
    "CallbackDispatch",
    "CollectFn",
    "Dispatch",
    "SplitAlong",
    "as_dispatch",
    "concat",
    "concat_or_list",
    "first_of_replicas",
    "split_along",
    "value_mesh",
]

CollectFn = Callable[[ValueMesh[Any], str], Any]
"""A collect function: receives the results and the name of the dimension split along."""


def _resolve_dim(shape: Shape, dim: str | None) -> str:
    """The dimension to split along: ``dim`` itself, or the only dimension when None."""
    dims = ", ".join(repr(label) for label in shape.labels) or "none"
    if dim is None:
        if len(shape.labels) != 1:
            raise ValueError(
                f"shape {shape} has dimensions {dims}; say which one to split along with dim="
            )
        return shape.labels[0]
    if dim not in shape.labels:
        raise DimensionError(
            f"shape {shape} does not have dimension {dim!r}; its dimensions are: {dims}"
        )
    return dim


def _is_array(value: object) -> bool:
    """True for a numpy ndarray or torch tensor with at least one dimension."""
    for module_name, type_name in (("numpy", "ndarray"), ("torch", "Tensor")):
        module = sys.modules.get(module_name)
        if module is not None and isinstance(value, getattr(module, type_name)):
            # A 0-d array is a scalar: it has no first axis and is replicated.
            return bool(getattr(value, "ndim", 0) > 0)
    return False


def _is_splittable(value: object) -> bool:
    # Exact types only: a namedtuple or other sequence subclass is a record, not a batch.
    return type(value) in (list, tuple) or _is_array(value)


def _bounds(length: int, shards: int, pad: bool, what: str) -> list[tuple[int, int]]:
    """``(start, stop)`` of each shard of a sequence of ``length`` items."""
    quotient, remainder = divmod(length, shards)
    if remainder and not pad:
        raise ValueError(
            f"{what} has length {length}, which does not split evenly into {shards} shards; "
            f"pass pad=True to give the first {remainder} shards one extra item"
        )
    bounds = []
    start = 0
    for i in range(shards):
        stop = start + quotient + (1 if i < remainder else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _chunks(value: Any, shards: int, pad: bool, what: str) -> list[Any]:
    """``value`` cut into ``shards`` contiguous chunks, or repeated if it does not split."""
    if not _is_splittable(value):
        return [value] * shards
    # Slicing gives views for arrays and tensors (no copy), and a list/tuple of the same type.
    return [value[start:stop] for start, stop in _bounds(len(value), shards, pad, what)]


def first_of_replicas(results: ValueMesh[Any], dim: str | None = None) -> list[Any]:
    """One result per index along ``dim``: the one at coordinate 0 on every other dimension.

    With a ``{"dp": 2, "tp": 2}`` mesh split along ``dp``, the ranks of a dp group all got
    the same chunk (replicated along ``tp``); this keeps the first of each group.

    Args:
        results: One value per point, as returned by the calls.
        dim: The dimension the arguments were split along; None means the only one.

    Raises:
        ValueError: ``dim`` is not a dimension of the results, or is None with several.
    """
    dim = _resolve_dim(results.shape, dim)
    others = [label for label in results.shape.labels if label != dim]
    # Row-major order with every other coordinate fixed at 0 is ascending order along dim.
    return [value for point, value in results.items() if all(point[o] == 0 for o in others)]


def concat(results: ValueMesh[Any], dim: str | None = None) -> Any:
    """Concatenate `first_of_replicas` in order: the inverse of the split.

    Lists and tuples are chained (into a tuple only when every part is a tuple), torch
    tensors joined with ``torch.cat`` and numpy arrays with ``numpy.concatenate``.

    Args:
        results: One value per point, as returned by the calls.
        dim: The dimension the arguments were split along; None means the only one.

    Raises:
        TypeError: The results are not all lists/tuples, all tensors or all arrays.
        ValueError: As for `first_of_replicas`.
    """
    parts = first_of_replicas(results, dim)
    if all(isinstance(p, list | tuple) for p in parts):
        chained = itertools.chain.from_iterable(parts)
        return tuple(chained) if all(isinstance(p, tuple) for p in parts) else list(chained)
    for module_name, type_name, join in (
        ("torch", "Tensor", "cat"),
        ("numpy", "ndarray", "concatenate"),
    ):
        module = sys.modules.get(module_name)
        if module is not None and all(isinstance(p, getattr(module, type_name)) for p in parts):
            return getattr(module, join)(parts)
    kinds = sorted({type(p).__name__ for p in parts})
    raise TypeError(
        f"concat needs every result to be a list or tuple, every one a torch tensor, or every "
        f"one a numpy array; got {', '.join(kinds)}. Use collect='first_of_replicas' or "
        f"'value_mesh' for other results"
    )


def concat_or_list(results: ValueMesh[Any], dim: str | None = None) -> Any:
    """`concat` when the per-shard results can be joined, else the list of them.

    The default of ``shard``: a batch of lists or tensors comes back as one, and an
    endpoint that returns a scalar per shard (a loss, a count) gives one per shard.
    """
    parts = first_of_replicas(results, dim)
    try:
        return concat(results, dim)
    except TypeError:
        return parts


def value_mesh(results: ValueMesh[Any], dim: str | None = None) -> ValueMesh[Any]:
    """Return ``results`` unchanged: one value per point, replicas included."""
    return results


_COLLECTORS: dict[str, CollectFn] = {
    "auto": concat_or_list,
    "concat": concat,
    "first_of_replicas": first_of_replicas,
    "value_mesh": value_mesh,
}


class Dispatch(ABC):
    """A built-in dispatch for ``shard``: splits the arguments and combines the results."""

    @abstractmethod
    def split(
        self, shape: Shape, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """One ``(args, kwargs)`` per point of ``shape``, row-major.

        Raises:
            ValueError: The arguments cannot be split over ``shape``.
        """

    @abstractmethod
    def collect(self, results: ValueMesh[Any]) -> Any:
        """Combine one result per point into what ``shard`` returns."""


@dataclass(frozen=True)
class SplitAlong(Dispatch):
    """Split batch-like arguments along one dimension of the mesh; built by `split_along`.

    Attributes:
        dim: The dimension to split along; None means the shape's only dimension.
        pad: Whether uneven lengths are allowed (the first shards then get one extra item).
        collect_fn: Combines the results; called as ``collect_fn(results, dim)``.
    """

    dim: str | None
    pad: bool
    collect_fn: CollectFn

    def split(
        self, shape: Shape, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """See `split_along`."""
        dim = _resolve_dim(shape, self.dim)
        shards = shape.extent[dim]
        arg_chunks = [
            _chunks(a, shards, self.pad, f"positional argument {i}") for i, a in enumerate(args)
        ]
        kwarg_chunks = {
            k: _chunks(v, shards, self.pad, f"argument {k!r}") for k, v in kwargs.items()
        }
        calls = []
        for point in shape.points():
            i = point[dim]
            calls.append(
                (tuple(c[i] for c in arg_chunks), {k: c[i] for k, c in kwarg_chunks.items()})
            )
        return calls

    def collect(self, results: ValueMesh[Any]) -> Any:
        """Combine the results with ``collect_fn``."""
        return self.collect_fn(results, _resolve_dim(results.shape, self.dim))


def split_along(
    dim: str | None = None,
    *,
    pad: bool = False,
    collect: Literal["auto", "concat", "first_of_replicas", "value_mesh"] | CollectFn = "auto",
) -> SplitAlong:
    """A dispatch that shards every batch-like argument along the mesh dimension ``dim``.

    An argument that is exactly a list or tuple, a numpy ndarray or a torch tensor (with at
    least one dimension) is cut along its first axis into as many contiguous chunks as
    ``dim`` has indices. Chunk ``i`` goes to every point whose coordinate on ``dim`` is
    ``i``, so it is replicated along the other dimensions (every ``tp`` rank of a dp group
    gets the same chunk). Arrays and tensors are sliced, so chunks are views, not copies.
    Everything else (scalars, strings, dicts, None, namedtuples, 0-d arrays) goes whole
    to every point. Each batch-like argument is split on its own; they need not have the
    same length.

    Args:
        dim: The dimension to split along; None means the mesh's only dimension (an error
            if it has several).
        pad: If False, a length that is not a multiple of the number of shards is an
            error. If True, lengths may be uneven and, like ``numpy.array_split``, the
            first ``length % shards`` shards get one extra item (shards may be empty when
            the length is below the number of shards).
        collect: How results combine: ``"auto"`` (`concat_or_list`, the default),
            ``"concat"`` (`concat`, strict), ``"first_of_replicas"``
            (`first_of_replicas`), ``"value_mesh"`` (`value_mesh`), or a callable
            ``collect(results, dim)`` receiving the `ValueMesh` and the resolved dimension.

    Raises:
        ValueError: ``collect`` is an unknown name. At split time: ``dim`` is not a
            dimension of the mesh, or an argument does not split evenly and ``pad`` is False.
    """
    if isinstance(collect, str):
        try:
            collect_fn = _COLLECTORS[collect]
        except KeyError:
            names = ", ".join(repr(n) for n in _COLLECTORS)
            raise ValueError(f"unknown collect {collect!r}; expected one of {names}") from None
    elif callable(collect):
        collect_fn = collect
    else:
        raise TypeError(f"collect must be a name or a callable, not {collect!r}")
    return SplitAlong(dim, pad, collect_fn)


class CallbackDispatch:
    """A user's dispatch function that makes the calls itself (the Ray ActorMesh style).

    The function is called as ``fn(mesh, method_name, *args, **kwargs)`` and its return
    value is what ``shard`` returns.

    Attributes:
        fn: The user's dispatch function.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def invoke(
        self, mesh: Any, method_name: str, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        """Run the user's function on ``mesh`` for the endpoint ``method_name``."""
        return self.fn(mesh, method_name, *args, **kwargs)

    def __repr__(self) -> str:
        return f"CallbackDispatch({self.fn!r})"


def as_dispatch(
    fn: Dispatch | CallbackDispatch | Callable[..., Any] | None,
) -> Dispatch | CallbackDispatch:
    """Normalise what a user passes as ``@endpoint(dispatch=...)`` or per call.

    Args:
        fn: A `Dispatch` or `CallbackDispatch` (used as is); None for the default,
            ``split_along()``; or any other callable, taken as a Ray-style
            ``dispatch_fn(mesh, method_name, *args, **kwargs)`` and wrapped in a
            `CallbackDispatch`.

    Raises:
        TypeError: ``fn`` is none of these.
    """
    if fn is None:
        return split_along()
    if isinstance(fn, Dispatch | CallbackDispatch):
        return fn
    if callable(fn):
        return CallbackDispatch(fn)
    raise TypeError(
        f"dispatch must be a Dispatch, a callable dispatch_fn(mesh, method_name, *args, "
        f"**kwargs) or None, not {type(fn).__name__}"
    )
