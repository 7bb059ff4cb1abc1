"""Reductions of ``record_metric`` values: merging tallies of parts equals the tally of
the whole (any split across ranks), and bad input is refused where it is recorded."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actormesh._core import _metrics
from actormesh._pure._reduce import Reduce, Tally, reduce_states

values = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40)


def _tally(reduce: Reduce, items: list[float]) -> Tally:
    tally = Tally(reduce)
    for item in items:
        tally.add(item)
    return tally


def _expected(reduce: Reduce, items: list[float]) -> float:
    return {
        Reduce.MEAN: statistics.fmean,
        Reduce.SUM: math.fsum,
        Reduce.MAX: max,
        Reduce.MIN: min,
        Reduce.STD: statistics.pstdev,
    }[reduce](items)


@given(values, st.lists(st.integers(0, 40), max_size=4), st.sampled_from(list(Reduce)))
def test_merged_parts_reduce_as_the_whole(items, cuts, reduce) -> None:
    bounds = sorted({0, len(items), *(c % (len(items) + 1) for c in cuts)})
    parts = [items[a:b] for a, b in itertools.pairwise(bounds)]
    states = [{"m": _tally(reduce, part).state()} for part in parts]
    values_, ranks, conflicts = reduce_states(states)
    assert values_["m"] == pytest.approx(_expected(reduce, items), rel=1e-6, abs=1e-6)
    assert ranks == {"m": len(parts)}
    assert conflicts == []


def test_a_key_reduced_two_ways_by_two_ranks_is_reported() -> None:
    first = {"m": _tally(Reduce.MEAN, [1.0]).state()}
    second = {"m": _tally(Reduce.SUM, [5.0]).state()}
    values_, _, conflicts = reduce_states([first, second])
    assert values_ == {"m": 1.0}
    assert conflicts == ["m"]


def test_record_metric_refuses_bad_input_at_the_call() -> None:
    with pytest.raises(TypeError, match="key must be a non-empty str"):
        _metrics.record_metric("", 1.0)
    with pytest.raises(TypeError, match="value must be a number"):
        _metrics.record_metric("x", "1.0")
    with pytest.raises(TypeError, match="value must be a number, not object"):
        _metrics.record_metric("x", object())
    with pytest.raises(ValueError, match="unknown reduction 'median'"):
        _metrics.record_metric("x", 1.0, "median")
    _metrics.record_metric("test_reduce.k", 1.0, Reduce.MAX)
    with pytest.raises(ValueError, match="recorded with 'max' already"):
        _metrics.record_metric("test_reduce.k", 2.0, Reduce.MIN)
    taken = _metrics.take()
    assert taken["test_reduce.k"][:2] == ("max", 1)
    assert "test_reduce.k" not in _metrics.take()  # a take starts new tallies
