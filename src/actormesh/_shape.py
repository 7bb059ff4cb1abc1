"""Named-dimension shapes, their points, and one-value-per-point meshes.

This module is pure: plain data and arithmetic, no I/O and no imports from the rest of
actormesh. A `Shape` names the dimensions of a mesh (``{dp=2, tp=2}``) and records, for each
of its points in row-major order, the *root rank* the point stands for: the flat index of
that point in the mesh it was originally cut from. Slicing keeps root ranks and renumbers
coordinates, so a sliced shape's points are 0-based in its own dimensions while its
``ranks`` still say which members of the root mesh it covers.
"""

from __future__ import annotations

import math
import operator
import pprint
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Generic, TypeVar

from ._exceptions import DimensionError

__all__ = [
    "Extent",
    "Point",
    "Shape",
    "Shaped",
    "ValueMesh",
    "pack_ranks",
    "rank_runs",
    "run_ranks",
    "runs_count",
    "unpack_ranks",
    "view_shape",
]

T = TypeVar("T")

# Aliases taken before the classes shadow ``slice`` with a method of the same name.
_Selector = int | slice | range
_builtin_slice = slice


def _strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides: the flat distance between neighbours along each dimension."""
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    return tuple(strides)


def pack_ranks(sizes: Sequence[int], ranks: Sequence[int]) -> tuple[int, ...]:
    """``ranks`` (row-major over ``sizes``) as a message carries them: ``(offset,
    *strides)`` when they are a strided block of the root ranks (every slice of a mesh
    is), else all of them. A call to a slice tells each of its actors the slice's shape,
    so without this every actor's header would carry every rank of the slice: bytes that
    grow with the square of the slice. The packed form is used only when it is shorter,
    so the two are told apart by their length (``unpack_ranks``)."""
    ranks = tuple(ranks)
    if len(ranks) <= len(sizes) + 1:
        return ranks
    offset = ranks[0]
    strides = []
    for stride, size in zip(_strides(sizes), sizes, strict=True):
        strides.append(ranks[stride] - offset if size > 1 else 0)
    positions = [offset]
    for size, stride in zip(sizes, strides, strict=True):
        positions = [p + i * stride for p in positions for i in range(size)]
    return (offset, *strides) if tuple(positions) == ranks else ranks


def unpack_ranks(sizes: Sequence[int], packed: Sequence[int]) -> tuple[int, ...]:
    """The ranks ``pack_ranks`` packed."""
    if len(packed) == math.prod(sizes):
        return tuple(packed)
    positions = [packed[0]]
    for size, stride in zip(sizes, packed[1:], strict=True):
        positions = [p + i * stride for p in positions for i in range(size)]
    return tuple(positions)


def rank_runs(ranks: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """``ranks`` (distinct) as sorted runs ``(first, past the last)``: a reducing call's
    partial result names the ranks it stands for this way, a few runs for a subtree of
    host agents (hosts in a tree hold blocks of consecutive ranks) however many ranks."""
    runs: list[tuple[int, int]] = []
    for rank in sorted(ranks):
        if runs and runs[-1][1] == rank:
            runs[-1] = (runs[-1][0], rank + 1)
        else:
            runs.append((rank, rank + 1))
    return tuple(runs)


def run_ranks(runs: Iterable[tuple[int, int]]) -> list[int]:
    """The ranks of ``rank_runs``' runs."""
    return [rank for first, past in runs for rank in range(first, past)]


def runs_count(runs: Iterable[tuple[int, int]]) -> int:
    """How many ranks ``runs`` hold (without listing them)."""
    return sum(past - first for first, past in runs)


def _describe(labels: Sequence[str], sizes: Sequence[object]) -> str:
    pairs = zip(labels, sizes, strict=True)
    return "{" + ", ".join(f"{label}={size}" for label, size in pairs) + "}"


def _as_size(value: object, what: str) -> int:
    """Validate one dimension size; `bool` is rejected although it is an `int` subclass."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"size of {what} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"size of {what} must be >= 1, got {value}")
    return value


def _check_label(label: object) -> str:
    if not isinstance(label, str) or not label.isidentifier():
        raise ValueError(f"dimension label must be a Python identifier, got {label!r}")
    return label


def _select_one(label: str, size: int, selector: object) -> tuple[range, bool]:
    """Resolve a selector for one dimension.

    Returns:
        The selected indices, in order, and whether the dimension survives (an int drops it).
    """
    if isinstance(selector, _builtin_slice):
        try:
            picked = range(size)[selector]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"invalid slice {selector!r} for dimension {label!r}: {exc}") from None
        if not picked:
            raise ValueError(
                f"{selector!r} selects nothing from dimension {label!r} of size {size}"
            )
        return picked, True
    if isinstance(selector, range):
        if not selector:
            raise ValueError(f"{selector!r} selects nothing from dimension {label!r}")
        # A range is monotone, so its ends bound every element.
        for index in (selector[0], selector[-1]):
            if not 0 <= index < size:
                raise IndexError(
                    f"index {index} of {selector!r} is out of range for dimension "
                    f"{label!r} of size {size}"
                )
        return selector, True
    if isinstance(selector, bool):
        raise TypeError(f"dimension {label!r} cannot be indexed by a bool")
    try:
        index = operator.index(selector)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"dimension {label!r} must be indexed by an int, slice or range, "
            f"not {type(selector).__name__}"
        ) from None
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of range for dimension {label!r} of size {size}")
    index %= size
    return range(index, index + 1), False


class Extent(Mapping[str, int]):
    """The sizes of a mesh's dimensions: a mapping of label to size, in dimension order.

    ``Extent(["hosts", "gpus"], [2, 4])`` reads ``{hosts: 2, gpus: 4}``; it equals any
    mapping with the same items (``mesh.extent == {"hosts": 2, "gpus": 4}``).
    """

    __slots__ = ("_labels", "_sizes")

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        if len(labels) != len(sizes):
            raise ValueError(f"{len(labels)} labels given for {len(sizes)} sizes")
        self._labels = tuple(labels)
        self._sizes = tuple(sizes)

    @property
    def labels(self) -> list[str]:
        """The dimension names."""
        return list(self._labels)

    @property
    def sizes(self) -> list[int]:
        """The size of each dimension."""
        return list(self._sizes)

    @property
    def nelements(self) -> int:
        """The number of points (the product of the sizes)."""
        return math.prod(self._sizes)

    def __getitem__(self, label: str) -> int:
        try:
            return self._sizes[self._labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(self._labels, self._sizes)) + "}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Extent, (self._labels, self._sizes))


@dataclass(frozen=True, eq=False, init=False, repr=False)
class Point(Mapping[str, int]):
    """Coordinates of one point of a shape.

    A point is a mapping from label to index, so ``mesh.slice(**point)`` and ``f(**point)``
    work. Two points are equal when their labels, sizes and coordinates are. Build one
    from ``(labels, sizes, coords)``, or as Monarch does from a flat rank in an extent:
    ``Point(4, Extent(["hosts", "gpus"], [2, 3]))``.

    Attributes:
        labels: The dimension names of the shape the point belongs to.
        sizes: The size of each dimension.
        coords: The index of the point along each dimension.
    """

    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    coords: tuple[int, ...]

    def __init__(self, labels: Any, sizes: Any, coords: Any = None) -> None:
        if coords is None and isinstance(labels, int) and isinstance(sizes, Extent):
            rank, extent = labels, sizes
            labels, sizes = tuple(extent.labels), tuple(extent.sizes)
            if not 0 <= rank < math.prod(sizes):
                raise IndexError(f"rank {rank} is out of range for extent {extent}")
            coords = tuple(rank // stride % size for stride, size in zip(_strides(sizes), sizes))
        elif coords is None:
            raise TypeError("Point takes (labels, sizes, coords), or (rank, extent)")
        object.__setattr__(self, "labels", tuple(labels))
        object.__setattr__(self, "sizes", tuple(sizes))
        object.__setattr__(self, "coords", tuple(coords))
        self.__post_init__()

    def __reduce__(self) -> tuple[Any, ...]:
        return (Point, (self.labels, self.sizes, self.coords))

    def __post_init__(self) -> None:
        if not len(self.labels) == len(self.sizes) == len(self.coords):
            raise ValueError(
                f"labels, sizes and coords must have one entry per dimension, got "
                f"{len(self.labels)}, {len(self.sizes)} and {len(self.coords)}"
            )
        for label, size, coord in zip(self.labels, self.sizes, self.coords, strict=True):
            if not 0 <= coord < size:
                raise IndexError(f"coordinate {coord} is out of range for {label!r}={size}")

    def _not_found(self, label: str) -> DimensionError:
        return DimensionError(f"Dimension {label!r} not found (dimensions: {list(self.labels)})")

    @property
    def rank(self) -> int:
        """The flat row-major index of this point within its shape."""
        return sum(c * s for c, s in zip(self.coords, _strides(self.sizes), strict=True))

    def size(self, label: str | None = None) -> int:
        """The size of dimension ``label``, or the number of points of the whole shape."""
        if label is None:
            return math.prod(self.sizes)
        try:
            return self.sizes[self.labels.index(label)]
        except ValueError:
            raise DimensionError(
                f"Dimension {label!r} not found (dimensions: {list(self.labels)})"
            ) from None

    @property
    def extent(self) -> Extent:
        """Label to size of the shape this point belongs to."""
        return Extent(self.labels, self.sizes)

    def __getitem__(self, label: str) -> int:
        try:
            return self.coords[self.labels.index(label)]
        except ValueError:
            raise DimensionError(
                f"Dimension {label!r} not found (dimensions: {list(self.labels)})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Point):
            return NotImplemented
        return (self.labels, self.sizes, self.coords) == (other.labels, other.sizes, other.coords)

    def __hash__(self) -> int:
        return hash((self.labels, self.sizes, self.coords))

    def brief(self) -> str:
        """The coordinates alone, as actormesh's messages and output prefixes write them:
        ``{hosts=0, gpus=1}``."""
        return _describe(self.labels, self.coords)

    def __repr__(self) -> str:
        # Monarch's form (its str too): each coordinate over its dimension's size.
        parts = (f"{label!r}: {c}/{n}" for label, c, n in zip(self.labels, self.coords, self.sizes))
        return "{" + ", ".join(parts) + "}"

    __str__ = __repr__


@dataclass(frozen=True)
class Shape:
    """Named dimensions over a set of root ranks, in row-major order.

    Attributes:
        labels: Dimension names, unique Python identifiers.
        sizes: Size of each dimension, each at least 1.
        ranks: The root rank of each point, row-major; one entry per point. A shape with no
            dimensions has exactly one point.
    """

    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "sizes", tuple(self.sizes))
        object.__setattr__(self, "ranks", tuple(self.ranks))
        if len(self.labels) != len(self.sizes):
            raise ValueError(f"{len(self.labels)} labels given for {len(self.sizes)} sizes")
        for label, size in zip(self.labels, self.sizes, strict=True):
            _as_size(size, f"dimension {_check_label(label)!r}")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"dimension labels must be unique, got {self.labels}")
        count = math.prod(self.sizes)
        if len(self.ranks) != count:
            raise ValueError(
                f"shape {_describe(self.labels, self.sizes)} has {count} points "
                f"but {len(self.ranks)} ranks were given"
            )
        for rank in self.ranks:
            if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
                raise ValueError(f"ranks must be non-negative ints, got {rank!r}")
        if len(set(self.ranks)) != count:
            raise ValueError("ranks must be unique")

    @classmethod
    def of(cls, spec: Shape | int | Sequence[int] | Mapping[str, int]) -> Shape:
        """Build a shape over ranks ``0..n-1`` from a user's shape spec.

        Args:
            spec: ``n`` for one dimension ``dim0``; a sequence of sizes for dimensions
                ``dim0, dim1, ...``; a mapping of label to size; or a `Shape`, returned as is.

        Raises:
            TypeError: The spec or one of its sizes has the wrong type.
            ValueError: A size is below 1 or a label is not an identifier.
        """
        if isinstance(spec, Shape):
            return spec
        if isinstance(spec, Mapping):
            return cls.from_dims(tuple(spec.keys()), tuple(spec.values()))
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls.from_dims(("dim0",), (spec,))
        if isinstance(spec, tuple | list):
            return cls.from_dims(tuple(f"dim{i}" for i in range(len(spec))), tuple(spec))
        raise TypeError(
            "a shape is an int, a tuple or list of ints, or a mapping of label to int, "
            f"not {type(spec).__name__}"
        )

    @classmethod
    def from_dims(cls, labels: Sequence[str], sizes: Sequence[int]) -> Shape:
        """Build a shape with the given dimensions over ranks ``0..n-1``."""
        if len(labels) != len(sizes):
            raise ValueError(f"{len(labels)} labels given for {len(sizes)} sizes")
        for label, size in zip(labels, sizes, strict=True):
            _as_size(size, f"dimension {label!r}")
        return cls(tuple(labels), tuple(sizes), tuple(range(math.prod(sizes))))

    def __len__(self) -> int:
        return len(self.ranks)

    def __str__(self) -> str:
        return _describe(self.labels, self.sizes)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.labels)

    @property
    def extent(self) -> dict[str, int]:
        """Label to size, in dimension order."""
        return dict(zip(self.labels, self.sizes, strict=True))

    def slice(self, **dims: _Selector) -> Shape:
        """Select part of the shape by dimension name.

        An int picks one index and drops the dimension; a slice or range keeps it. Negative
        ints count from the end. Dimensions not named are kept whole.

        Raises:
            ValueError: An unknown dimension, or a slice that selects nothing.
            IndexError: An int or range index outside the dimension.
            TypeError: A selector that is not an int, slice or range.
        """
        return self._slice_positions(dims)[0]

    def index(self, key: object) -> Shape:
        """Select part of the shape positionally, as ``mesh[1, :]`` does.

        Args:
            key: An int, slice or range, or a tuple of them, one per leading dimension;
                trailing dimensions not covered are kept whole.

        Raises:
            IndexError: More entries than dimensions, or an index out of range.
            ValueError: A slice that selects nothing.
            TypeError: An entry that is not an int, slice or range.
        """
        return self._index_positions(key)[0]

    def split(self, **dims: Any) -> Shape:
        """Replace dimensions by several, row-major.

        Two spellings: ``split(gpus={"dp": 2, "tp": 2})``, or Monarch's
        ``split(gpus=("dp", "tp"), tp=2)``: new names as a tuple, and the sizes of some of
        them as keywords. One new size per split may be unknown (``-1`` or left out) and
        is then inferred. Ranks are unchanged.

        Raises:
            ValueError: An unknown dimension, sizes whose product is not the size, more than
                one unknown size, a size for no new dimension, or labels that collide.
        """
        sizes_given = {k: v for k, v in dims.items() if k not in self.labels and isinstance(v, int)}
        splits: dict[str, object] = {}
        for label, spec in dims.items():
            if label in sizes_given:
                continue
            if isinstance(spec, tuple | list) and all(isinstance(n, str) for n in spec):
                splits[label] = {name: sizes_given.get(name, -1) for name in spec}
            else:
                splits[label] = spec
        named = {name for spec in splits.values() if isinstance(spec, Mapping) for name in spec}
        stray = sorted(set(sizes_given) - named)
        if stray:
            raise ValueError(f"split() got sizes for {stray}, which no split names")
        self._check_known(splits)
        labels: list[str] = []
        sizes: list[int] = []
        for label, size in zip(self.labels, self.sizes, strict=True):
            if label not in splits:
                labels.append(label)
                sizes.append(size)
                continue
            parts = self._split_one(label, size, splits[label])
            labels.extend(parts)
            sizes.extend(parts.values())
        return Shape(tuple(labels), tuple(sizes), self.ranks)

    @staticmethod
    def _split_one(label: str, size: int, parts: object) -> dict[str, int]:
        """The new dimensions replacing ``label``, with a ``-1`` size inferred."""
        if not isinstance(parts, Mapping) or not parts:
            raise ValueError(f"split of {label!r} needs a non-empty mapping of label to size")
        new: dict[str, int] = {}
        inferred: list[str] = []
        for part, n in parts.items():
            if isinstance(n, int) and n == -1:
                inferred.append(part)
                new[part] = -1
            else:
                new[part] = _as_size(n, f"{part!r} in split of {label!r}")
        if len(inferred) > 1:
            raise ValueError(f"split of {label!r}: at most one size may be -1, got {inferred}")
        known = math.prod(n for n in new.values() if n != -1)
        if inferred and size % known == 0:
            new[inferred[0]] = size // known
        if math.prod(new.values()) != size:
            wanted = _describe(list(parts), [str(n) for n in parts.values()])
            raise ValueError(f"cannot split {label!r} of size {size} into {wanted}")
        return new

    def flatten(self, label: str) -> Shape:
        """Merge all dimensions into one called ``label``; ranks are unchanged."""
        return Shape((label,), (len(self),), self.ranks)

    def rename(self, **names: str) -> Shape:
        """Rename dimensions, ``rename(gpus="dp")``; ranks are unchanged.

        Raises:
            ValueError: An unknown dimension, or new labels that collide or are not
                identifiers.
        """
        self._check_known(names)
        return Shape(
            tuple(names.get(label, label) for label in self.labels), self.sizes, self.ranks
        )

    def point(self, index: int) -> Point:
        """The coordinates of the ``index``-th point in this shape's own dimensions.

        Raises:
            IndexError: The index is not below the number of points.
        """
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"point {index} is out of range for shape {self} of {count} points")
        index %= count
        coords = [0] * self.ndim
        for dim in range(self.ndim - 1, -1, -1):
            index, coords[dim] = divmod(index, self.sizes[dim])
        return Point(self.labels, self.sizes, tuple(coords))

    def points(self) -> Iterator[Point]:
        """Every point, row-major."""
        return (self.point(i) for i in range(len(self)))

    def index_of_rank(self, root_rank: int) -> int:
        """The position ``i`` with ``ranks[i] == root_rank``.

        Raises:
            ValueError: The shape does not cover that root rank.
        """
        try:
            return self._rank_positions[root_rank]
        except KeyError:
            raise ValueError(f"root rank {root_rank} is not in shape {self}") from None

    @cached_property
    def _rank_positions(self) -> dict[int, int]:
        return {rank: i for i, rank in enumerate(self.ranks)}

    def __getstate__(self) -> dict[str, Any]:
        # The rank lookup table is a cache; rebuild it on demand rather than ship it.
        return {k: v for k, v in self.__dict__.items() if k != "_rank_positions"}

    def _check_known(self, dims: Mapping[str, object]) -> None:
        unknown = [label for label in dims if label not in self.labels]
        if unknown:
            have = ", ".join(self.labels) if self.labels else "none"
            raise DimensionError(
                f"shape {self} does not have dimension {', '.join(map(repr, unknown))}; "
                f"its dimensions are: {have}"
            )

    def _slice_positions(self, dims: Mapping[str, object]) -> tuple[Shape, list[int]]:
        self._check_known(dims)
        picks = [
            _select_one(label, size, dims[label]) if label in dims else (range(size), True)
            for label, size in zip(self.labels, self.sizes, strict=True)
        ]
        return self._pick(picks)

    def _index_positions(self, key: object) -> tuple[Shape, list[int]]:
        entries = key if isinstance(key, tuple) else (key,)
        if len(entries) > self.ndim:
            raise IndexError(
                f"too many indices for shape {self}: {len(entries)} given, {self.ndim} dimensions"
            )
        return self._slice_positions(dict(zip(self.labels, entries, strict=False)))

    def _pick(self, picks: Sequence[tuple[range, bool]]) -> tuple[Shape, list[int]]:
        """The sub-shape of the given per-dimension selections, and its flat positions here."""
        positions = [0]
        for (picked, _), stride in zip(picks, _strides(self.sizes), strict=True):
            positions = [p + i * stride for p in positions for i in picked]
        kept = [
            (label, len(picked))
            for label, (picked, keep) in zip(self.labels, picks, strict=True)
            if keep
        ]
        shape = Shape(
            tuple(label for label, _ in kept),
            tuple(size for _, size in kept),
            tuple(self.ranks[p] for p in positions),
        )
        return shape, positions


class ValueMesh(Generic[T]):
    """One value per point of a shape, as returned by ``call``.

    Values are stored row-major. Indexing with ints, ``vm[1, 0]``, gives a value once every
    dimension is fixed; slices give another `ValueMesh`.
    """

    def __init__(self, shape: Shape, values: Sequence[T]) -> None:
        """Pair a shape with its values.

        Raises:
            TypeError: ``shape`` is not a `Shape`.
            ValueError: The number of values differs from the number of points.
        """
        if not isinstance(shape, Shape):
            raise TypeError(f"shape must be a Shape, not {type(shape).__name__}")
        values = tuple(values)
        if len(values) != len(shape):
            raise ValueError(
                f"shape {shape} has {len(shape)} points but {len(values)} values were given"
            )
        self._shape = shape
        self._values = values

    @property
    def shape(self) -> Shape:
        """The shape the values are laid out on."""
        return self._shape

    @property
    def extent(self) -> Extent:
        """Label to size of the mesh."""
        return Extent(self._shape.labels, self._shape.sizes)

    @property
    def sizes(self) -> dict[str, int]:
        """Label to size of the mesh, as a dict."""
        return self._shape.extent

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """The number of values along ``dim`` (a label, several, or all of them)."""
        return _size_of(self._shape, dim)

    def get(self, index: int) -> T:
        """The value of the ``index``-th point, row-major."""
        return self._values[index]

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> list[tuple[Point, T]]:
        """``(point, value)`` pairs, row-major."""
        return list(zip(self._shape.points(), self._values, strict=True))

    def values(self) -> list[T]:
        """The values, row-major (a new list)."""
        return list(self._values)

    def __iter__(self) -> Iterator[tuple[Point, T]]:
        return iter(self.items())

    def item(self, **coords: int) -> T:
        """The value at the given coordinates; every dimension must be named.

        Raises:
            ValueError: A dimension is missing or unknown.
            IndexError: A coordinate is out of range.
            TypeError: A coordinate is not an int.
        """
        self._shape._check_known(coords)
        missing = [label for label in self._shape.labels if label not in coords]
        if missing:
            raise DimensionError(f"item() of shape {self._shape} needs a coordinate for {missing}")
        for label, coord in coords.items():
            if isinstance(coord, _builtin_slice | range):
                raise TypeError(f"item() needs an int for {label!r}, not {coord!r}")
        return self._values[self._shape._slice_positions(coords)[1][0]]

    def __getitem__(self, key: object) -> Any:
        shape, positions = self._shape._index_positions(key)
        if shape.ndim == 0:
            return self._values[positions[0]]
        return ValueMesh(shape, [self._values[p] for p in positions])

    def slice(self, **dims: _Selector) -> ValueMesh[T]:
        """The values of part of the mesh, selected as `Shape.slice` does."""
        shape, positions = self._shape._slice_positions(dims)
        return ValueMesh(shape, [self._values[p] for p in positions])

    def flatten(self, label: str) -> ValueMesh[T]:
        """The same values along one dimension called ``label``."""
        return ValueMesh(
            Shape((label,), (len(self._values),), tuple(range(len(self)))), self._values
        )

    def split(self, **dims: Any) -> ValueMesh[T]:
        """The same values with dimensions split as `Shape.split` does."""
        return ValueMesh(self._shape.split(**dims), self._values)

    def rename(self, **names: str) -> ValueMesh[T]:
        """The same values with dimensions renamed."""
        return ValueMesh(self._shape.rename(**names), self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ValueMesh):
            return NotImplemented
        return self._shape == other._shape and self._values == other._values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        # Monarch's layout: the extent, then every (point, value) pair, one per line.
        pairs = pprint.pformat(tuple(self.items()), width=88)
        return f"ValueMesh({self.extent!r}):\n" + textwrap.indent(pairs, "  ")


class Shaped:
    """Base of mesh handles: a ``Shape``, the size questions answered from it, and the
    views on other dimensions of the same members (each handle says how it makes one)."""

    _shape: Shape

    def _with_shape(self, shape: Shape) -> Any:
        """A handle on the same members, laid out as ``shape``."""
        raise NotImplementedError

    def slice(self, **dims: _Selector) -> Any:
        """The members at these coordinates; an int drops its dimension, a slice or range
        keeps it (``mesh.slice(dp=0, tp=slice(0, 2))``)."""
        return self._with_shape(self._shape.slice(**dims))

    def __getitem__(self, key: Any) -> Any:
        return self._with_shape(self._shape.index(key))

    def split(self, **dims: Any) -> Any:
        """Split dimensions in several: ``split(gpus={"dp": 2, "tp": 2})`` or Monarch's
        ``split(gpus=("dp", "tp"), tp=2)``."""
        return self._with_shape(self._shape.split(**dims))

    def flatten(self, label: str) -> Any:
        """All dimensions as one, named ``label``."""
        return self._with_shape(self._shape.flatten(label))

    def rename(self, **names: str) -> Any:
        """Rename dimensions: ``rename(gpus="dp")``."""
        return self._with_shape(self._shape.rename(**names))

    @property
    def shape(self) -> Shape:
        """Dimensions of this handle (a slice has fewer points than the whole mesh)."""
        return self._shape

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """Members (actors, processes, hosts) along ``dim``: one label, several, or all."""
        return _size_of(self._shape, dim)

    @property
    def sizes(self) -> dict[str, int]:
        """Label to size of this handle's dimensions."""
        return self._shape.extent

    @property
    def extent(self) -> Extent:
        """Label to size of this handle's dimensions, as an ``Extent``."""
        return Extent(self._shape.labels, self._shape.sizes)

    def __len__(self) -> int:
        return len(self._shape)


def _size_of(shape: Shape, dim: str | Sequence[str] | None) -> int:
    if dim is None:
        return len(shape)
    labels = [dim] if isinstance(dim, str) else list(dim)
    extent = shape.extent
    unknown = [label for label in labels if label not in extent]
    if unknown:
        raise DimensionError(f"{shape} does not have dimension {unknown[0]!r}")
    return math.prod(extent[label] for label in labels)


@lru_cache(maxsize=64)
def view_shape(labels: tuple[str, ...], sizes: tuple[int, ...], packed: tuple[int, ...]) -> Shape:
    """The shape of the slice a call was made on, from the view its header carries
    (``pack_ranks``); the actors of one slice are called again and again with the same
    view, so it is unpacked once."""
    return Shape(labels, sizes, unpack_ranks(sizes, packed))
