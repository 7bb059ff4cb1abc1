"""Numerical fidelity: tensors and gradients through actormesh.rpc, held to torch's RPC.

One program (``numerics_programs.numerics``) runs once per backend in a group of two
processes: it sends every kind of tensor (layouts, strides, dtypes, edge sizes, large
ones, autograd state, sparse, quantized) as arguments and results, inside and outside a
distributed autograd context, then runs distributed backward passes over leaves of every
layout and dtype, hooks, retain_graph, repeated passes, sparse gradients with
``DistributedOptimizer``. Each test checks a behaviour on both backends;
``test_both_backends_observe_the_same`` compares everything, and lists the differences
actormesh keeps on purpose (docs/rpc.md, "Numerical fidelity").
"""

from __future__ import annotations

import math
from typing import Any

import numerics_programs
import pytest
from rpc_support import run_group

pytestmark = pytest.mark.timeout(300)

BACKENDS = ["torch", "actormesh"]
SENDS = ["sent", "returned", "remote"]
IN_CONTEXT = ["sent_in_context", "echoed_in_context"]

_cache: dict[str, Any] = {}


def observed(backend: str) -> dict[str, Any]:
    """What the program returned on w0 under ``backend`` (run once per backend)."""
    if backend not in _cache:
        try:
            _cache[backend] = run_group(numerics_programs.numerics, 2, backend, timeout=250)[0]
        except Exception as error:
            _cache[backend] = error
    found = _cache[backend]
    if isinstance(found, Exception):
        raise found
    result: dict[str, Any] = found
    return result


@pytest.fixture(params=BACKENDS)
def seen(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, observed(request.param)


# What any copy of a tensor into another process changes, torch's as actormesh's: a small
# view of a large storage is copied on its own (dense), a tensor requiring grad arrives as
# a leaf (outside a context), hooks and .grad stay with the sender.
CHANGED_BY_THE_TRIP: dict[str, dict[str, Any]] = {
    "big_column": {"stride": [1], "contiguous": True},
    "large_column": {"stride": [1], "contiguous": True},
    "non_leaf": {"is_leaf": True, "grad_fn": False},
    "hooked": {"hooks": False},
    "with_dot_grad": {"dot_grad": False},
}
# What torch's RPC alone changes (actormesh keeps these as a local call, torch's pickle
# and Monarch do): the coalesced flag of a sparse tensor, attributes of a plain tensor.
TORCH_ALSO_CHANGES: dict[str, dict[str, Any]] = {
    "sparse_coo": {"coalesced": False},
    "with_attribute": {"attributes": None},
}


def _expected(local: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    expected = {**local, **changes}
    return {key: value for key, value in expected.items() if value is not None}


def test_tensors_arrive_with_the_senders_dtype_shape_strides_and_values(
    seen: tuple[str, dict[str, Any]],
) -> None:
    backend, out = seen
    transport = out["transport"]
    local = transport["local"]
    mismatches = []
    for section in SENDS:
        for name, facts in local.items():
            got = transport[section][name]
            if backend == "torch" and name == "sparse_csr" and section != "sent":
                # torch's RPC cannot return a CSR tensor (actormesh can).
                assert got["message"] == "Cannot access storage of SparseCsrTensorImpl"
                continue
            changes = dict(CHANGED_BY_THE_TRIP.get(name, {}))
            if backend == "torch":
                changes.update(TORCH_ALSO_CHANGES.get(name, {}))
            if got != _expected(facts, changes):
                mismatches.append(f"{section} {name}: sent {facts}, got {got}")
    assert not mismatches, "\n".join(mismatches)


def test_every_dtype_and_layout_is_covered(seen: tuple[str, dict[str, Any]]) -> None:
    _, out = seen
    local = out["transport"]["local"]
    assert local["transposed"]["contiguous"] is False
    assert local["channels_last"]["channels_last"] is True
    assert local["expanded"]["stride"] == [0, 1]
    assert local["size1_odd_stride"]["stride"] == [1, 1]
    assert local["conj_view"]["conj_neg"] == [True, False]
    assert local["conj_imag_neg"]["conj_neg"] == [False, True]
    assert local["empty_3x0_t"]["stride"] == [1, 1]
    dtypes = {facts["dtype"] for facts in local.values() if "dtype" in facts}
    assert len(dtypes) >= 13, dtypes


def test_inside_a_context_tensors_requiring_grad_arrive_behind_a_recv_node(
    seen: tuple[str, dict[str, Any]],
) -> None:
    backend, out = seen
    transport = out["transport"]
    for name in ("requires_grad", "transposed_requires_grad", "non_leaf", "hooked"):
        for section in IN_CONTEXT:
            got = transport[section][name]
            assert got["requires_grad"] and got["grad_fn"] and not got["is_leaf"], (section, name)
            assert got["stride"] == transport["local"][name]["stride"]
    for name in ("contiguous", "large", "channels_last", "parameter_frozen", "int64"):
        assert transport["sent_in_context"][name] == transport["sent"][name], name
    # A Parameter requiring grad: torch's arrives as a Parameter that is a leaf of the
    # callee (the sender's parameter gets no gradient); actormesh's as a tensor behind a
    # recv node, so its gradient reaches the sender (see test_graphs...).
    parameter = transport["sent_in_context"]["parameter"]
    if backend == "torch":
        assert [parameter["type"], parameter["is_leaf"], parameter["grad_fn"]] == [
            "Parameter",
            True,
            False,
        ]
    else:
        assert [parameter["type"], parameter["is_leaf"], parameter["grad_fn"]] == [
            "Tensor",
            False,
            True,
        ]


def test_in_place_changes_by_the_callee_stay_with_the_callee(
    seen: tuple[str, dict[str, Any]],
) -> None:
    _, out = seen
    # [the sum the callee saw after add_(1), the caller's tensor after the call]
    assert out["transport"]["in_place_w1"] == [3.0, 0.0]
    assert out["transport"]["in_place_w0"] == [3.0, 0.0]  # a call to oneself copies too


def test_gradients_of_leaves_keep_their_dtype_and_layout(seen: tuple[str, dict[str, Any]]) -> None:
    _, out = seen
    layouts = out["layouts"]
    for name, case in layouts["sent"].items():
        leaf, grad = case["leaf"], case["grad"]
        assert grad is not None, name
        assert [grad["dtype"], grad["shape"]] == [leaf["dtype"], leaf["shape"]], name
        assert not case["dot_grad"], name
        if name not in ("expanded", "column_view"):
            # AccumulateGrad's contract: a dense leaf's gradient has the leaf's strides.
            assert grad["stride"] == leaf["stride"], name
        else:
            assert grad["contiguous"], name
    held = layouts["held"]
    assert set(held) == {*layouts["sent"], "parameter"}
    assert all(grad is not None for grad in held.values()), held
    assert held["channels_last"]["channels_last"] is True
    assert held["transposed"]["stride"] == [1, 4]
    assert held["float16"]["dtype"] == "torch.float16"
    assert held["bfloat16"]["dtype"] == "torch.bfloat16"
    assert layouts["float64_result"]["dtype"] == "torch.float32"


def test_hooks_registered_before_sending_run_in_the_distributed_pass(
    seen: tuple[str, dict[str, Any]],
) -> None:
    _, out = seen
    hooks = out["hooks"]
    assert hooks["leaf"] == [4.0, 4.0, 4.0]  # d(2 x)/dx, doubled by the leaf's hook
    assert hooks["non_leaf"] == [20.0, 20.0, 20.0]  # times 10 by the sent non-leaf's hook
    assert hooks["result_hook"] == [200.0, 200.0, 200.0]  # 2 x, times 100 on the result
    # Post-accumulate-grad hooks follow .grad, which distributed autograd leaves alone.
    assert hooks["post_hook"] == [[2.0, 2.0, 2.0], []]
    assert hooks["dot_grad"] == [False, False, False, False]


def test_graphs_accumulate_across_roots_passes_and_workers(
    seen: tuple[str, dict[str, Any]],
) -> None:
    backend, out = seen
    graphs = out["graphs"]
    # retain_graph=True: a second pass over the same graph accumulates.
    assert graphs["twice_with_retain"] == [[2.0, 4.0], "ok", [4.0, 8.0]]
    assert graphs["two_roots"] == [4.0, 0.0]
    assert graphs["local_and_remote"] == [5.0, 5.0]
    assert graphs["non_leaf_sent"] == [10.0, 10.0]
    root, grad = graphs["scalar_root"]
    assert [root["shape"], root["grad_fn"], grad] == [[], True, 4.0]
    result, grad, empty_grad = graphs["zero_size"]
    assert [result["shape"], result["grad_fn"], grad] == [[0, 3], True, 2.0]
    assert empty_grad["shape"] == [0, 3]
    large_grad, exact = graphs["large"]
    assert [large_grad["shape"], exact] == [[numerics_programs.LARGE], True]
    if backend == "actormesh":
        # torch's engine waits for the first forward's send functions (not run there).
        assert graphs["new_forward_after_backward"] == [[2.0, -2.0], [4.0, 0.0]]


def test_retain_graph_false_does_not_free_graphs_on_actormesh(
    seen: tuple[str, dict[str, Any]],
) -> None:
    """A kept difference (docs/rpc.md): actormesh keeps a context's graphs until the
    context is released, so a second pass without retain_graph accumulates where torch's
    raises."""
    backend, out = seen
    graphs = out["graphs"]
    first, again, after = graphs["twice_without_retain"]
    assert first == [2.0, 4.0]
    local_again, local_after = graphs["local_twice"]
    if backend == "torch":
        assert "backward through the graph a second time" in again["message"]
        assert "backward through the graph a second time" in local_again["message"]
        assert after == local_after == [2.0, 4.0]
    else:
        assert again == local_again == "ok"
        assert after == local_after == [4.0, 8.0]


def test_a_parameter_sent_in_a_context_gets_its_gradient_on_actormesh(
    seen: tuple[str, dict[str, Any]],
) -> None:
    """A kept difference: torch's callee receives a detached Parameter, a leaf of its own
    context, and the sender's parameter receives nothing."""
    backend, out = seen
    on_sender, on_callee = out["graphs"]["parameter_sent"]
    if backend == "torch":
        assert [on_sender, on_callee] == [None, 1]
    else:
        assert [on_sender, on_callee] == [[2.0, 2.0], 0]


def test_sparse_gradients_stay_sparse_and_train_with_distributed_optimizer(
    seen: tuple[str, dict[str, Any]],
) -> None:
    _, out = seen
    sparse = out["sparse"]
    for sparse_table in (True, False):
        layout = "torch.sparse_coo" if sparse_table else "torch.strided"
        for optimizer in ("SGD", "Adagrad"):
            steps = sparse[f"remote_table_sparse_{sparse_table}_{optimizer}"]
            assert [grad["layout"] for grad, _ in steps] == [layout, layout]
            weights = [weight["values"] for _, weight in steps]
            assert weights[0] != weights[1]  # each step moved the table
            assert not any(weight["dot_grad"] for _, weight in steps)
    # Dense and sparse tables, same seed and data: the same training.
    for optimizer in ("SGD", "Adagrad"):
        dense = sparse[f"remote_table_sparse_False_{optimizer}"]
        sparse_steps = sparse[f"remote_table_sparse_True_{optimizer}"]
        assert [w["values"] for _, w in dense] == [w["values"] for _, w in sparse_steps]
    assert sparse["local_table"]["layout"] == "torch.sparse_coo"
    assert sparse["sparse_leaf_sent"]["layout"] == "torch.sparse_coo"


# -- side by side ---------------------------------------------------------------------------

# Where the two backends differ, each on purpose (docs/rpc.md, "Numerical fidelity"):
# path prefixes of the results, each of which must still differ.
KEPT_DIFFERENCES = {
    # actormesh keeps a sparse tensor's coalesced flag (torch's RPC drops it).
    *(f".transport.{section}.sparse_coo.coalesced" for section in SENDS + IN_CONTEXT),
    ".sparse.sparse_leaf_sent.coalesced",
    # actormesh keeps a plain tensor's Python attributes (torch's RPC drops them).
    *(f".transport.{section}.with_attribute.attributes" for section in SENDS + IN_CONTEXT),
    # torch's RPC cannot return a CSR tensor.
    ".transport.returned.sparse_csr",
    ".transport.remote.sparse_csr",
    ".transport.echoed_in_context.sparse_csr",
    # A Parameter requiring grad in a context arrives behind a recv node on actormesh.
    *(
        f".transport.{section}.{name}"
        for section in IN_CONTEXT
        for name in ("parameter", "parameter_transposed", "parameter_with_attribute")
    ),
    ".graphs.parameter_sent",
    # retain_graph=False does not free graphs on actormesh.
    ".graphs.twice_without_retain",
    ".graphs.local_twice",
    # torch's engine hangs on it.
    ".graphs.new_forward_after_backward",
}


def test_both_backends_observe_the_same() -> None:
    differences = _differences(observed("torch"), observed("actormesh"))
    unexplained = [
        line
        for path, line in differences
        if not any(
            path == kept or path.startswith((kept + ".", kept + "[")) for kept in KEPT_DIFFERENCES
        )
    ]
    assert not unexplained, "\n".join(unexplained)
    gone = [
        kept
        for kept in KEPT_DIFFERENCES
        if not any(
            path == kept or path.startswith((kept + ".", kept + "[")) for path, _ in differences
        )
    ]
    assert not gone, f"no longer different (update KEPT_DIFFERENCES and the docs): {gone}"


_MISSING = object()


def _differences(expected: Any, got: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(expected, dict) and isinstance(got, dict):
        return [
            d
            for key in {**expected, **got}
            for d in _differences(
                expected.get(key, _MISSING), got.get(key, _MISSING), f"{path}.{key}"
            )
        ]
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        return [
            d
            for i, (e, g) in enumerate(zip(expected, got))
            for d in _differences(e, g, f"{path}[{i}]")
        ]
    if isinstance(expected, float) and isinstance(got, float):
        same = math.isclose(expected, got, rel_tol=1e-6, abs_tol=1e-7)
    else:
        same = expected == got
    shown = ["<missing>" if v is _MISSING else repr(v)[:200] for v in (expected, got)]
    return [] if same else [(path, f"{path}: torch {shown[0]} != actormesh {shown[1]}")]
