"""Tensors through actor endpoints arrive as a local call would have given them.

The reference is plain local torch: what the endpoint would have received (or returned)
had it been called in this process. Every kind of tensor of ``fidelity_actors.cases()``
(layouts, strides, dtypes, lazy conjugate/negative views, edge sizes, tensors over the
shared-memory threshold, autograd state, Parameters, sparse, quantized) is sent as an
argument, echoed back, and built by the actor and returned, and what arrives is
compared with the local tensor: values, dtype, shape, strides, layout, ``requires_grad``,
type and attributes. What a copy into another process cannot keep (the autograd graph,
hooks, ``.grad``, memory shared with the sender) is listed in ``LOST_IN_A_COPY``, as
torch's own pickle (which Monarch uses) loses it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fidelity_actors import TensorProbe

from actormesh import ActorMesh, ProcMesh, this_host
from tensor_facts import LARGE, cases, facts

pytestmark = pytest.mark.timeout(120)

CASES = cases()

# What a copy changes. A view using less than half of a span of at least 8 KiB travels
# as a copy of its own elements (torch RPC's rule), so it arrives dense.
LOST_IN_A_COPY: dict[str, dict[str, Any]] = {
    "big_column": {"stride": [1], "contiguous": True},
    "non_leaf": {"is_leaf": True, "grad_fn": False},
    "hooked": {"hooks": False},
    "with_dot_grad": {"dot_grad": False},
}


@pytest.fixture(scope="module")
def probes() -> Iterator[tuple[ProcMesh, ActorMesh[TensorProbe]]]:
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        yield procs, procs.spawn("probe", TensorProbe)
    finally:
        procs.stop().get(timeout=60)


def _expected(name: str) -> dict[str, Any]:
    return {**facts(CASES[name]), **LOST_IN_A_COPY.get(name, {})}


@pytest.mark.parametrize("name", list(CASES))
def test_a_tensor_arrives_as_a_local_call_would_have_received_it(probes: Any, name: str) -> None:
    _, mesh = probes
    one = mesh.slice(gpus=0)
    tensor = CASES[name]
    expected = _expected(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the hooked case's warning
        assert one.describe.call_one(tensor).get(timeout=60) == [expected]
        assert facts(one.echo.call_one(tensor).get(timeout=60)) == expected
    assert facts(one.make.call_one(name).get(timeout=60)) == expected


def test_strides_survive_a_call_to_the_whole_mesh(probes: Any) -> None:
    _, mesh = probes
    sent = [CASES[name] for name in ("large_channels_last", "large_transposed", "transposed")]
    expected = [facts(t) for t in sent]
    seen = mesh.describe.call(*sent).get(timeout=60)
    assert [facts_seen for _, facts_seen in seen.items()] == [expected, expected]


def test_views_keep_their_strides_and_small_views_of_large_spans_are_copied(probes: Any) -> None:
    _, mesh = probes
    one = mesh.slice(gpus=0)
    big = torch.arange(4096.0 * 4).reshape(4096, 4)  # 64 KiB
    column, rows, tiny = big[:, 1], big[100:3000], big[10:12, 1:3]
    column_back, rows_back, tiny_back = one.echo.call_one((column, rows, tiny)).get(timeout=60)
    # A column uses a quarter of the span it covers: a copy of its own.
    assert [column_back.stride(), column_back.untyped_storage().nbytes()] == [(1,), 16384]
    # Most of a span: the span travels, the view keeps its strides over it.
    assert [rows_back.stride(), rows_back.untyped_storage().nbytes()] == [(4, 1), 46400]
    # A span under 8 KiB travels whole even when the view uses little of it.
    assert [tiny_back.stride(), tiny_back.untyped_storage().nbytes()] == [(4, 1), 24]
    for sent, back in ((column, column_back), (rows, rows_back), (tiny, tiny_back)):
        assert torch.equal(sent, back)
    # A broadcast view travels as the memory it reads, not the memory it would fill.
    expanded = one.echo.call_one(CASES["large_expanded"]).get(timeout=60)
    assert [expanded.stride(), expanded.untyped_storage().nbytes()] == [(0, 1), 4000]


def test_received_tensors_are_the_callees_own_copies(probes: Any) -> None:
    _, mesh = probes
    one = mesh.slice(gpus=0)
    for tensor in (torch.zeros(3), torch.zeros(LARGE), torch.zeros(4, 3).t()):
        assert one.add_one.call_one(tensor).get(timeout=60) == float(tensor.numel())
        assert float(tensor.sum()) == 0.0  # the caller's tensor is untouched
    # Views of one storage in one message arrive as separate tensors (torch's pickle does
    # the same); the same tensor twice arrives as one.
    base = torch.zeros(6)
    a, b, again = one.echo.call_one((base, base[2:], base)).get(timeout=60)
    assert a is again
    a.add_(1)
    assert float(b.sum()) == 0.0


def test_a_tensor_with_hooks_warns_that_they_stay_behind(probes: Any) -> None:
    _, mesh = probes
    with pytest.warns(UserWarning, match="backward hook .* will not be serialized"):
        back = mesh.slice(gpus=0).echo.call_one(CASES["hooked"]).get(timeout=60)
    assert back.requires_grad and back.is_leaf and not back._backward_hooks
