"""Shape, Point and ValueMesh: properties checked against brute force, and error messages."""

from __future__ import annotations

import itertools
import math
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actormesh._shape import (
    Point,
    Shape,
    ValueMesh,
    pack_ranks,
    rank_runs,
    run_ranks,
    runs_count,
    unpack_ranks,
    view_shape,
)

LABELS = ("hosts", "gpus", "dp", "tp", "pp")

Selector = int | slice | range


@st.composite
def shapes(draw: st.DrawFn, max_dims: int = 3, max_size: int = 4) -> Shape:
    """Shapes of up to ``max_dims`` dimensions over arbitrary, unordered root ranks."""
    ndim = draw(st.integers(0, max_dims))
    labels = draw(st.lists(st.sampled_from(LABELS), min_size=ndim, max_size=ndim, unique=True))
    sizes = draw(st.lists(st.integers(1, max_size), min_size=ndim, max_size=ndim))
    count = math.prod(sizes)
    ranks = draw(st.lists(st.integers(0, 500), min_size=count, max_size=count, unique=True))
    return Shape(tuple(labels), tuple(sizes), tuple(ranks))


@st.composite
def ranges_within(draw: st.DrawFn, size: int) -> range:
    """Non-empty ranges whose every element indexes a dimension of ``size``."""
    start = draw(st.integers(0, size - 1))
    step = draw(st.sampled_from([1, 2, 3, -1, -2]))
    room = (size - 1 - start) // step if step > 0 else start // -step
    count = draw(st.integers(1, room + 1))
    return range(start, start + count * step, step)


def selectors(size: int) -> st.SearchStrategy[Selector]:
    """Every kind of valid selector for a dimension of ``size``."""
    nonempty_slices = st.slices(size).filter(lambda s: len(picked(size, s)) > 0)
    return st.one_of(st.integers(-size, size - 1), nonempty_slices, ranges_within(size))


@st.composite
def shape_and_selection(draw: st.DrawFn) -> tuple[Shape, dict[str, Selector]]:
    shape = draw(shapes())
    chosen = draw(st.lists(st.sampled_from(shape.labels), unique=True)) if shape.ndim else []
    extent = shape.extent
    return shape, {label: draw(selectors(extent[label])) for label in chosen}


def brute_force_ranks(shape: Shape) -> dict[tuple[int, ...], int]:
    """Coordinates to root rank, by enumerating coordinates in row-major order."""
    grid = itertools.product(*(range(size) for size in shape.sizes))
    return dict(zip(grid, shape.ranks, strict=True))


def picked(size: int, selector: Selector) -> list[int]:
    """The indices a selector picks, using list indexing as the reference."""
    if isinstance(selector, range):
        return list(selector)
    everything = list(range(size))
    return everything[selector] if isinstance(selector, slice) else [everything[selector]]


def expected_slice(shape: Shape, selection: dict[str, Selector]) -> tuple[list[str], list[int]]:
    """The labels and root ranks a selection should give, by brute force."""
    by_coords = brute_force_ranks(shape)
    per_dim = [
        picked(size, selection.get(label, slice(None)))
        for label, size in zip(shape.labels, shape.sizes, strict=True)
    ]
    labels = [label for label in shape.labels if not isinstance(selection.get(label), int)]
    return labels, [by_coords[coords] for coords in itertools.product(*per_dim)]


# Properties


@given(shape_and_selection())
def test_slice_matches_brute_force_over_coordinates(
    case: tuple[Shape, dict[str, Selector]],
) -> None:
    shape, selection = case
    labels, ranks = expected_slice(shape, selection)
    result = shape.slice(**selection)
    assert list(result.labels) == labels
    assert list(result.ranks) == ranks
    assert set(result.ranks) <= set(shape.ranks)
    assert len(result) == math.prod(result.sizes)


@given(shape_and_selection())
def test_slice_with_forward_selectors_keeps_root_order(
    case: tuple[Shape, dict[str, Selector]],
) -> None:
    shape, selection = case
    forward = {
        label: s
        for label, s in selection.items()
        if not isinstance(s, slice | range) or (s.step or 1) > 0
    }
    positions = [shape.index_of_rank(r) for r in shape.slice(**forward).ranks]
    assert positions == sorted(positions)


@given(st.data())
def test_index_matches_slice_by_position(data: st.DataObject) -> None:
    shape = data.draw(shapes())
    count = data.draw(st.integers(0, shape.ndim))
    key = tuple(data.draw(selectors(size)) for size in shape.sizes[:count])
    by_name = dict(zip(shape.labels, key, strict=False))
    assert shape.index(key) == shape.slice(**by_name)
    if count == 1:
        assert shape.index(key[0]) == shape.slice(**by_name)


@given(st.sets(st.integers(0, 10_000)))
def test_rank_runs_hold_exactly_the_ranks_in_order(ranks: set[int]) -> None:
    runs = rank_runs(ranks)
    assert run_ranks(runs) == sorted(ranks)
    assert runs_count(runs) == len(ranks)
    # Maximal runs: neighbours are never split, and no run is empty.
    assert all(first < past for first, past in runs)
    assert all(past < following for (_, past), (following, _) in itertools.pairwise(runs))


def test_a_subtree_of_hosts_is_a_few_runs_however_many_ranks() -> None:
    # Host positions 0 and 16..31 and 272..527 (a subtree of a tree of fan-out 16), 16
    # ranks each: three runs for 4,368 ranks.
    hosts = [0, *range(16, 32), *range(272, 528)]
    assert rank_runs(16 * h + g for h in hosts for g in range(16)) == (
        (0, 16),
        (256, 512),
        (4352, 8448),
    )


@given(shapes())
def test_points_enumerate_coordinates_row_major(shape: Shape) -> None:
    grid = list(itertools.product(*(range(size) for size in shape.sizes)))
    points = list(shape.points())
    assert [p.coords for p in points] == grid
    for i, point in enumerate(points):
        assert point.rank == i
        assert point.size() == len(shape)
        assert point == shape.point(i)
        assert dict(point) == dict(zip(shape.labels, grid[i], strict=True))


@given(shapes())
def test_index_of_rank_inverts_ranks(shape: Shape) -> None:
    for i, rank in enumerate(shape.ranks):
        assert shape.index_of_rank(rank) == i
    absent = max(shape.ranks) + 1
    with pytest.raises(ValueError, match=f"root rank {absent} is not in shape"):
        shape.index_of_rank(absent)


@st.composite
def shape_and_split(draw: st.DrawFn) -> tuple[Shape, str, dict[str, int]]:
    shape = draw(shapes(max_dims=2, max_size=12).filter(lambda s: s.ndim > 0))
    label = draw(st.sampled_from(shape.labels))
    size = shape.extent[label]
    factors: list[int] = []
    rest = size
    for _ in range(draw(st.integers(0, 2))):
        factor = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
        factors.append(factor)
        rest //= factor
    factors.append(rest)
    names = [f"part{i}" for i in range(len(factors))]
    return shape, label, dict(zip(names, factors, strict=True))


@given(shape_and_split(), st.booleans())
def test_split_keeps_ranks_and_coordinates(
    case: tuple[Shape, str, dict[str, int]], infer_last: bool
) -> None:
    shape, label, parts = case
    spec = dict(parts)
    if infer_last:
        spec[list(spec)[-1]] = -1
    split = shape.split(**{label: spec})
    assert split.ranks == shape.ranks
    assert split.flatten("all").ranks == shape.ranks
    assert split.flatten("all").sizes == (len(shape),)
    # Row-major split: the new coordinates, read as a mixed-radix number, give the old one.
    names = list(parts)
    for i in range(len(shape)):
        new, old = split.point(i), shape.point(i)
        merged = 0
        for name in names:
            merged = merged * parts[name] + new[name]
        assert merged == old[label]


@given(shapes().filter(lambda s: s.ndim > 0), st.data())
def test_rename_keeps_ranks_and_sizes(shape: Shape, data: st.DataObject) -> None:
    old = data.draw(st.sampled_from(shape.labels))
    renamed = shape.rename(**{old: "renamed"})
    assert renamed.ranks == shape.ranks
    assert renamed.sizes == shape.sizes
    assert renamed.labels == tuple("renamed" if x == old else x for x in shape.labels)


@given(shape_and_selection())
def test_value_mesh_item_getitem_and_slice_agree_with_items(
    case: tuple[Shape, dict[str, Selector]],
) -> None:
    shape, selection = case
    mesh = ValueMesh(shape, [f"v{r}" for r in shape.ranks])
    for point, value in mesh.items():
        assert value == f"v{shape.ranks[point.rank]}"
        assert mesh.item(**point) == value
        assert mesh[point.coords] == value
        if shape.ndim == 1:
            assert mesh[point.coords[0]] == value
    sliced = mesh.slice(**selection)
    assert sliced.shape == shape.slice(**selection)
    assert list(sliced.values()) == [f"v{r}" for r in sliced.shape.ranks]


@given(shapes())
def test_shape_point_and_value_mesh_survive_pickle(shape: Shape) -> None:
    shape.index_of_rank(shape.ranks[0])  # fill the lookup cache before pickling
    assert pickle.loads(pickle.dumps(shape)) == shape
    point = shape.point(len(shape) - 1)
    assert pickle.loads(pickle.dumps(point)) == point
    mesh = ValueMesh(shape, list(shape.ranks))
    assert pickle.loads(pickle.dumps(mesh)) == mesh


# Examples


def test_of_accepts_int_sequence_and_mapping() -> None:
    assert Shape.of(4) == Shape(("dim0",), (4,), (0, 1, 2, 3))
    assert Shape.of((2, 3)).labels == ("dim0", "dim1")
    assert Shape.of([2, 3]).sizes == (2, 3)
    assert Shape.of({"dp": 2, "tp": 2}) == Shape.from_dims(("dp", "tp"), (2, 2))
    assert Shape.of({}) == Shape((), (), (0,))
    assert str(Shape.of({"dp": 2, "tp": 2})) == "{dp=2, tp=2}"
    assert str(Shape.of(())) == "{}"


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (True, TypeError, "a shape is an int"),
        ("4", TypeError, "not str"),
        (2.0, TypeError, "not float"),
        (0, ValueError, "must be >= 1, got 0"),
        ((2, -1), ValueError, "'dim1' must be >= 1"),
        ((2, True), TypeError, "'dim1' must be an int"),
        ({"dp": 2, "tp": 0}, ValueError, "'tp' must be >= 1"),
        ({"not a label": 2}, ValueError, "identifier"),
        ({1: 2}, ValueError, "identifier"),
    ],
)
def test_of_rejects_bad_specs_clearly(spec: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Shape.of(spec)  # type: ignore[arg-type]


def test_constructor_validates_fields() -> None:
    with pytest.raises(ValueError, match="unique"):
        Shape(("dp", "dp"), (1, 1), (0,))
    with pytest.raises(ValueError, match="has 4 points but 3 ranks"):
        Shape(("dp",), (4,), (0, 1, 2))
    with pytest.raises(ValueError, match="ranks must be unique"):
        Shape(("dp",), (2,), (1, 1))
    with pytest.raises(ValueError, match="2 labels given for 1 sizes"):
        Shape(("dp", "tp"), (2,), (0, 1))


def test_slice_int_drops_dimension_and_slice_keeps_it() -> None:
    shape = Shape.of({"dp": 2, "tp": 3})
    assert shape.slice(dp=1) == Shape(("tp",), (3,), (3, 4, 5))
    assert shape.slice(tp=-1) == Shape(("dp",), (2,), (2, 5))
    assert shape.slice(tp=slice(0, 3, 2)) == Shape(("dp", "tp"), (2, 2), (0, 2, 3, 5))
    assert shape.slice(dp=range(1, 2)).extent == {"dp": 1, "tp": 3}
    single = shape.slice(dp=1, tp=2)
    assert (single.ndim, len(single), single.ranks, str(single)) == (0, 1, (5,), "{}")
    assert shape.slice() == shape


def test_sliced_points_are_local_and_ranks_are_root() -> None:
    sliced = Shape.of({"dp": 2, "tp": 4}).slice(tp=slice(2, 4))
    assert sliced.point(3) == Point(("dp", "tp"), (2, 2), (1, 1))
    assert sliced.ranks[3] == 7
    assert sliced.index_of_rank(7) == 3
    with pytest.raises(ValueError, match="root rank 0 is not in shape"):
        sliced.index_of_rank(0)


def test_index_positional_forms() -> None:
    shape = Shape.of({"dp": 2, "tp": 2})
    assert shape.index((1, 0)).ranks == (2,)
    assert shape.index((1, slice(None))) == Shape(("tp",), (2,), (2, 3))
    assert shape.index(0) == shape.slice(dp=0)
    assert shape.index(()) == shape


def test_unknown_dimension_names_it_and_lists_the_shape() -> None:
    shape = Shape.of({"dp": 2, "tp": 2})
    with pytest.raises(
        ValueError, match=r"does not have dimension 'gpus'; its dimensions are: dp, tp"
    ):
        shape.slice(gpus=0)
    with pytest.raises(ValueError, match="'gpus'"):
        shape.rename(gpus="x")
    with pytest.raises(ValueError, match="'gpus'"):
        shape.split(gpus={"a": 1})
    with pytest.raises(ValueError, match="its dimensions are: none"):
        Shape.of(()).slice(dp=0)


@pytest.mark.parametrize("index", [4, -5])
def test_out_of_range_int_names_dimension_index_and_size(index: int) -> None:
    with pytest.raises(
        IndexError, match=f"index {index} is out of range for dimension 'gpus' of size 4"
    ):
        Shape.of({"gpus": 4}).slice(gpus=index)


def test_out_of_range_range_names_dimension() -> None:
    with pytest.raises(IndexError, match=r"index 4 of range\(2, 5\) .* 'gpus' of size 4"):
        Shape.of({"gpus": 4}).slice(gpus=range(2, 5))


def test_empty_selections_are_value_errors() -> None:
    shape = Shape.of({"gpus": 4})
    with pytest.raises(
        ValueError, match=r"slice\(3, 1, None\) selects nothing from dimension 'gpus'"
    ):
        shape.slice(gpus=slice(3, 1))
    with pytest.raises(ValueError, match="selects nothing from dimension 'gpus'"):
        shape.slice(gpus=range(0))
    with pytest.raises(ValueError, match=r"'gpus'.*step cannot be zero"):
        shape.slice(gpus=slice(None, None, 0))


@pytest.mark.parametrize("selector", ["0", 1.0, True, [0, 1], None])
def test_wrong_selector_type_is_type_error_naming_dimension(selector: object) -> None:
    with pytest.raises(TypeError, match="'gpus'"):
        Shape.of({"gpus": 4}).slice(gpus=selector)  # type: ignore[arg-type]


def test_too_many_positional_indices() -> None:
    with pytest.raises(IndexError, match=r"too many indices .* 3 given, 2 dimensions"):
        Shape.of({"dp": 2, "tp": 2}).index((0, 0, 0))
    with pytest.raises(IndexError, match="dimension 'tp' of size 2"):
        Shape.of({"dp": 2, "tp": 2}).index((0, 2))


def test_split_infers_one_size_and_rejects_bad_products() -> None:
    shape = Shape.of({"hosts": 2, "gpus": 8})
    assert shape.split(gpus={"dp": -1, "tp": 2}).extent == {"hosts": 2, "dp": 4, "tp": 2}
    with pytest.raises(ValueError, match=r"cannot split 'gpus' of size 8 into \{dp=3, tp=2\}"):
        shape.split(gpus={"dp": 3, "tp": 2})
    with pytest.raises(ValueError, match="cannot split 'gpus' of size 8"):
        shape.split(gpus={"dp": -1, "tp": 3})
    with pytest.raises(ValueError, match="at most one size may be -1"):
        shape.split(gpus={"dp": -1, "tp": -1})
    with pytest.raises(ValueError, match="unique"):
        shape.split(gpus={"hosts": 2, "tp": 4})
    with pytest.raises(ValueError, match="non-empty mapping"):
        shape.split(gpus={})


def test_rename_swaps_and_rejects_collisions() -> None:
    shape = Shape.of({"dp": 2, "tp": 3})
    assert shape.rename(dp="tp", tp="dp").extent == {"tp": 2, "dp": 3}
    with pytest.raises(ValueError, match="unique"):
        shape.rename(dp="tp")
    with pytest.raises(ValueError, match="identifier"):
        shape.rename(dp="not valid")


def test_point_is_a_hashable_mapping() -> None:
    point = Point(("dp", "tp"), (2, 2), (1, 0))
    assert (point.rank, point.size(), point.extent) == (2, 4, {"dp": 2, "tp": 2})
    assert str(point) == "{'dp': 1/2, 'tp': 0/2}"  # Monarch's form
    assert point.brief() == "{dp=1, tp=0}"  # actormesh's messages and prefixes
    assert dict(point) == {"dp": 1, "tp": 0}

    def pair(dp: int, tp: int) -> tuple[int, int]:
        return dp, tp

    assert pair(**point) == (1, 0)
    assert len({point, Point(("dp", "tp"), (2, 2), (1, 0))}) == 1
    assert point != Point(("dp", "tp"), (2, 4), (1, 0))
    with pytest.raises(KeyError):
        point["gpus"]
    with pytest.raises(IndexError, match="coordinate 2 is out of range for 'tp'=2"):
        Point(("dp", "tp"), (2, 2), (0, 2))


def test_point_out_of_range() -> None:
    with pytest.raises(IndexError, match=r"point 4 is out of range for shape \{gpus=4\}"):
        Shape.of({"gpus": 4}).point(4)
    assert Shape.of({"gpus": 4}).point(-1).coords == (3,)


def test_value_mesh_indexing() -> None:
    mesh = ValueMesh(Shape.of({"dp": 2, "tp": 2}), ["a", "b", "c", "d"])
    assert mesh[1, 0] == "c"
    assert mesh.item(dp=0, tp=1) == "b"
    assert mesh[1] == ValueMesh(Shape(("tp",), (2,), (2, 3)), ["c", "d"])
    assert mesh[:, 1] == ValueMesh(Shape(("dp",), (2,), (1, 3)), ["b", "d"])
    assert list(mesh.slice(tp=0).values()) == ["a", "c"]
    assert [(p.brief(), v) for p, v in mesh] == [
        ("{dp=0, tp=0}", "a"),
        ("{dp=0, tp=1}", "b"),
        ("{dp=1, tp=0}", "c"),
        ("{dp=1, tp=1}", "d"),
    ]
    assert repr(mesh) == (
        "ValueMesh({dp: 2, tp: 2}):\n"
        "  (({'dp': 0/2, 'tp': 0/2}, 'a'),\n"
        "   ({'dp': 0/2, 'tp': 1/2}, 'b'),\n"
        "   ({'dp': 1/2, 'tp': 0/2}, 'c'),\n"
        "   ({'dp': 1/2, 'tp': 1/2}, 'd'))"
    )
    assert ValueMesh(Shape.of(()), [7]).item() == 7


def test_value_mesh_errors() -> None:
    mesh = ValueMesh(Shape.of({"dp": 2, "tp": 2}), [0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"needs a coordinate for \['tp'\]"):
        mesh.item(dp=0)
    with pytest.raises(ValueError, match="does not have dimension 'gpus'"):
        mesh.item(dp=0, tp=0, gpus=0)
    with pytest.raises(IndexError, match="index 2 is out of range for dimension 'dp' of size 2"):
        mesh.item(dp=2, tp=0)
    with pytest.raises(TypeError, match="needs an int for 'tp'"):
        mesh.item(dp=0, tp=slice(None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has 4 points but 3 values"):
        ValueMesh(Shape.of(4), [1, 2, 3])
    with pytest.raises(TypeError, match="must be a Shape"):
        ValueMesh({"dp": 2}, [1, 2])  # type: ignore[arg-type]


def test_value_mesh_equality_and_length() -> None:
    shape = Shape.of(3)
    assert ValueMesh(shape, [1, 2, 3]) == ValueMesh(shape, (1, 2, 3))
    assert ValueMesh(shape, [1, 2, 3]) != ValueMesh(shape, [1, 2, 4])
    assert ValueMesh(shape, [1, 2, 3]) != ValueMesh(Shape.of({"x": 3}), [1, 2, 3])
    assert len(ValueMesh(shape, [1, 2, 3])) == 3
    assert list(ValueMesh(shape, [1, 2, 3]).values()) == [1, 2, 3]


@given(shapes())
def test_packed_ranks_unpack_to_the_same_ranks(shape: Shape) -> None:
    packed = pack_ranks(shape.sizes, shape.ranks)
    assert unpack_ranks(shape.sizes, packed) == shape.ranks
    assert len(packed) <= len(shape.ranks)
    assert view_shape(shape.labels, shape.sizes, packed) == shape


@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_every_slice_of_a_mesh_packs_to_its_offset_and_strides(
    sizes: list[int], data: st.DataObject
) -> None:
    whole = Shape(LABELS[: len(sizes)], tuple(sizes), tuple(range(math.prod(sizes))))
    dims = {}
    for label, size in zip(whole.labels, whole.sizes, strict=True):
        start = data.draw(st.integers(0, size - 1))
        step = data.draw(st.integers(1, 3))
        dims[label] = slice(start, size, step)
    part = whole.slice(**dims)
    packed = pack_ranks(part.sizes, part.ranks)
    if len(part.ranks) > part.ndim + 1:
        assert len(packed) == part.ndim + 1  # a header's view does not grow with the slice
    assert unpack_ranks(part.sizes, packed) == part.ranks


def test_ranks_that_are_no_strided_block_travel_whole() -> None:
    assert pack_ranks((4,), (0, 3, 1, 7)) == (0, 3, 1, 7)
    assert pack_ranks((2, 3), (0, 1, 2, 10, 11, 13)) == (0, 1, 2, 10, 11, 13)
    assert pack_ranks((2, 3), (0, 1, 2, 10, 11, 12)) == (0, 10, 1)
