"""Programs of the numerical-fidelity tests: what tensors and gradients look like after an
RPC, under torch.distributed.rpc and under actormesh.rpc.

Every program takes ``(rank, world_size, backend)`` and returns plain data (``facts`` of
each tensor: dtype, shape, strides, layout, autograd state, a digest of its bytes), so the
tests compare the two backends' results directly. The cases are built by ``cases()`` from
fixed seeds, so both workers of a group, and both backends, build the same tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from rpc_programs import api, init
from torch import nn

from tensor_facts import LARGE, cases, facts

# -- what a tensor looks like --------------------------------------------------------------


def storage_facts(*tensors: torch.Tensor) -> list[list[int]]:
    """[offset, storage bytes, index of the first tensor sharing its storage] per tensor."""
    ptrs = [t.untyped_storage().data_ptr() for t in tensors]
    return [
        [t.storage_offset(), t.untyped_storage().nbytes(), ptrs.index(p)]
        for t, p in zip(tensors, ptrs)
    ]


def attempt(call: Callable[[], Any]) -> Any:
    """``call()``'s value, or ``{"error": type name, "message": first line}``."""
    try:
        return call()
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        return {"error": type(error).__name__, "message": first[:200]}


# -- the cases --------------------------------------------------------------------------------


def make_case(name: str) -> torch.Tensor:
    return cases()[name]


def describe(t: Any) -> dict[str, Any]:
    return facts(t)


def describe_many(*tensors: Any) -> list[dict[str, Any]]:
    return [facts(t) for t in tensors]


def echo(value: Any) -> Any:
    return value


def add_one_in_place(t: torch.Tensor) -> float:
    t.add_(1)
    return float(t.sum())


def double(t: torch.Tensor) -> torch.Tensor:
    return t * 2


# -- tensors through RPC, both ways --------------------------------------------------------


def numerics(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """The whole comparison, driven by w0 (w1 serves): tensors through RPC, then
    distributed autograd."""
    ns = init(rank, world_size, backend, rpc_timeout=30)
    out: dict[str, Any] = {}
    if rank == 0:
        out["transport"] = _transport(ns)
        ns.rpc.rpc_sync("w1", hold_leaves)
        out["layouts"] = attempt(lambda: _leaf_layouts(ns))
        out["hooks"] = attempt(lambda: _hooks(ns))
        out["graphs"] = attempt(lambda: _graphs(ns, backend))
        out["sparse"] = attempt(lambda: _sparse(ns))
    ns.rpc.shutdown()
    return out


def _transport(ns: Any) -> dict[str, Any]:
    """Each case sent as an argument (facts seen by the callee) and returned as a result
    (facts seen by the caller), outside and inside a distributed autograd context."""
    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    out: dict[str, Any] = {"local": {name: facts(t) for name, t in cases().items()}}
    out["sent"] = {
        name: attempt(lambda t=t: rpc.rpc_sync("w1", describe, args=(t,)))
        for name, t in cases().items()
    }
    out["returned"] = {
        name: attempt(lambda n=name: facts(rpc.rpc_sync("w1", make_case, args=(n,))))
        for name in cases()
    }
    out["remote"] = {
        name: attempt(lambda n=name: facts(rpc.remote("w1", make_case, args=(n,)).to_here()))
        for name in cases()
    }
    with dist_autograd.context():
        out["sent_in_context"] = {
            name: attempt(lambda t=t: rpc.rpc_sync("w1", describe, args=(t,)))
            for name, t in cases().items()
        }
        out["echoed_in_context"] = {
            name: attempt(lambda t=t: facts(rpc.rpc_sync("w1", echo, args=(t,))))
            for name, t in cases().items()
        }
    # In-place changes by the callee stay with the callee, on a peer and on itself.
    for to in ("w1", "w0"):
        t = torch.zeros(3)
        seen = rpc.rpc_sync(to, add_one_in_place, args=(t,))
        out[f"in_place_{to}"] = [seen, float(t.sum())]
    return out


# -- distributed autograd ----------------------------------------------------------------------


def leaves() -> dict[str, torch.Tensor]:
    """Leaves requiring grad, of every layout and element type a gradient may take."""
    g = torch.Generator().manual_seed(1)

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    made = {
        "contiguous": randn(3, 4),
        "transposed": randn(3, 4).t(),
        "channels_last": randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
        "permuted": randn(2, 3, 4).permute(2, 0, 1),
        "size1_odd_stride": randn(4, 1).t(),
        "expanded": randn(1, 4).expand(3, 4),
        "column_view": randn(4, 5)[:, 2],
        "empty_0x3": torch.empty(0, 3),
        "scalar": torch.tensor(1.5),
        "float16": randn(2, 3, dtype=torch.float16),
        "bfloat16": randn(2, 3, dtype=torch.bfloat16),
        "float64_transposed": randn(3, 2, dtype=torch.float64).t(),
        "complex64": torch.complex(randn(3), randn(3)),
        "large": randn(LARGE),
        "large_transposed": randn(600, 1000).t(),
    }
    return {name: t.requires_grad_() for name, t in made.items()}


_HELD: dict[str, Any] = {}


def squared(t: torch.Tensor) -> torch.Tensor:
    """A differentiable function whose gradient keeps its argument's layout."""
    return t * t


def sum_twice(t: torch.Tensor) -> torch.Tensor:
    return (t * 2).sum()


def hold_leaves() -> int:
    """Keep this worker's own leaves (and parameters) for ``use_held``."""
    _HELD.update(leaves())
    _HELD["parameter"] = nn.Parameter(torch.randn(3, 4, generator=torch.Generator().manual_seed(2)))
    return len(_HELD)


def use_held(name: str) -> torch.Tensor:
    return squared(_HELD[name])


def held_grads(context_id: int) -> dict[str, Any]:
    grads = api().dist_autograd.get_gradients(context_id)
    return {name: facts(grads[t]) if t in grads else None for name, t in _HELD.items()}


def context_grad_count(context_id: int) -> int:
    return len(api().dist_autograd.get_gradients(context_id))


def to_float64(t: torch.Tensor) -> torch.Tensor:
    return t.double() * 2


def sparse_sum(t: torch.Tensor) -> torch.Tensor:
    return torch.sparse.sum(t * 3)


def embedding(sparse: bool) -> nn.Embedding:
    torch.manual_seed(5)
    return nn.Embedding(10, 3, sparse=sparse)


def embed(rref: Any, indices: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = rref.local_value()(indices)
    return out


def module_param_rrefs(rref: Any) -> list[Any]:
    return [api().rpc.RRef(p) for p in rref.local_value().parameters()]


def module_weight_grad(rref: Any, context_id: int) -> dict[str, Any]:
    return facts(api().dist_autograd.get_gradients(context_id)[rref.local_value().weight])


def module_weight(rref: Any) -> dict[str, Any]:
    weight = rref.local_value().weight
    return {**facts(weight), "dot_grad": weight.grad is not None}


def grad_facts(grads: dict[torch.Tensor, torch.Tensor], t: torch.Tensor) -> Any:
    return facts(grads[t]) if t in grads else None


def _leaf_layouts(ns: Any) -> dict[str, Any]:
    """The gradients of leaves of every layout and dtype, on the caller (sent to w1 and
    squared there) and on w1 (its own leaves, squared there, the loss made here)."""
    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    out: dict[str, Any] = {"sent": {}, "held": {}}
    for name, leaf in leaves().items():

        def one(leaf: torch.Tensor = leaf) -> Any:
            with dist_autograd.context() as context_id:
                result = rpc.rpc_sync("w1", squared, args=(leaf,))
                dist_autograd.backward(context_id, [result.real.float().sum()])
                grad = grad_facts(dist_autograd.get_gradients(context_id), leaf)
                return {
                    "leaf": facts(leaf),
                    "result": facts(result),
                    "grad": grad,
                    "dot_grad": leaf.grad is not None,
                }

        out["sent"][name] = attempt(one)
    with dist_autograd.context() as context_id:
        total = None
        for name in [*leaves(), "parameter"]:
            result = rpc.rpc_sync("w1", use_held, args=(name,))
            part = result.real.float().sum()
            total = part if total is None else total + part
        dist_autograd.backward(context_id, [total])
        out["held"] = rpc.rpc_sync("w1", held_grads, args=(context_id,))
    # A float32 leaf whose remote result is float64: the gradient comes back as float64.
    x = torch.randn(3, requires_grad=True)
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", to_float64, args=(x,)).sum()])
        out["float64_result"] = grad_facts(dist_autograd.get_gradients(context_id), x)
    return out


def _hooks(ns: Any) -> dict[str, Any]:
    """Hooks registered before sending, on a leaf, on a non-leaf and on the result."""
    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    out: dict[str, Any] = {}
    calls: list[str] = []
    leaf = torch.ones(3, requires_grad=True)
    leaf.register_hook(lambda grad: grad * 2)
    base = torch.ones(3, requires_grad=True)
    non_leaf = base * 1
    non_leaf.register_hook(lambda grad: grad * 10)
    posted = torch.ones(3, requires_grad=True)
    posted.register_post_accumulate_grad_hook(lambda t: calls.append("post"))
    with dist_autograd.context() as context_id:
        results = [rpc.rpc_sync("w1", sum_twice, args=(t,)) for t in (leaf, non_leaf, posted)]
        from_result = torch.ones(3, requires_grad=True)
        returned = rpc.rpc_sync("w1", squared, args=(from_result,))
        returned.register_hook(lambda grad: grad * 100)
        dist_autograd.backward(context_id, [sum(results) + returned.sum()])
        grads = dist_autograd.get_gradients(context_id)
        out["leaf"] = grads[leaf].tolist()
        out["non_leaf"] = grads[base].tolist()
        out["post_hook"] = [grads[posted].tolist(), calls]
        out["result_hook"] = grads[from_result].tolist()
        out["dot_grad"] = [t.grad is not None for t in (leaf, base, posted, from_result)]
    return out


def _graphs(ns: Any, backend: str) -> dict[str, Any]:
    """retain_graph, two passes in one context, zero-size, 0-dim roots, a leaf used both
    here and remotely, a non-leaf sent, a Parameter sent, large tensors."""
    cases = {
        name.removeprefix("_graph_"): fn
        for name, fn in globals().items()
        if name.startswith("_graph_")
    }
    return {
        name: "not run on torch"
        if backend == "torch" and name in TORCH_HANGS
        else attempt(lambda fn=fn: fn(ns.rpc, ns.dist_autograd))
        for name, fn in cases.items()
    }


def _graph_twice_without_retain(rpc: Any, dist_autograd: Any) -> Any:
    return _twice(rpc, dist_autograd, retain=False)


def _graph_twice_with_retain(rpc: Any, dist_autograd: Any) -> Any:
    return _twice(rpc, dist_autograd, retain=True)


def _twice(rpc: Any, dist_autograd: Any, retain: bool) -> Any:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        loss = rpc.rpc_sync("w1", squared, args=(x,)).sum()
        dist_autograd.backward(context_id, [loss], retain_graph=retain)
        first = dist_autograd.get_gradients(context_id)[x].tolist()
        again = attempt(lambda: dist_autograd.backward(context_id, [loss]))
        return [first, again or "ok", dist_autograd.get_gradients(context_id)[x].tolist()]


def _graph_local_twice(rpc: Any, dist_autograd: Any) -> Any:
    """A local graph only (no RPC): a second pass without retain_graph."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        loss = (x * x).sum()
        dist_autograd.backward(context_id, [loss])
        again = attempt(lambda: dist_autograd.backward(context_id, [loss]))
        return [again or "ok", dist_autograd.get_gradients(context_id)[x].tolist()]


def _graph_two_roots(rpc: Any, dist_autograd: Any) -> Any:
    x = torch.tensor([1.0, -1.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        first = rpc.rpc_sync("w1", squared, args=(x,)).sum()
        second = rpc.rpc_sync("w1", sum_twice, args=(x,))
        dist_autograd.backward(context_id, [first, second])
        return dist_autograd.get_gradients(context_id)[x].tolist()


def _graph_new_forward_after_backward(rpc: Any, dist_autograd: Any) -> Any:
    """A second forward and backward in a context whose first pass is done: they
    accumulate. (torch's engine waits for the first forward's send functions forever:
    not run on torch.)"""
    x = torch.tensor([1.0, -1.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", squared, args=(x,)).sum()])
        first = dist_autograd.get_gradients(context_id)[x].tolist()
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", sum_twice, args=(x,))])
        return [first, dist_autograd.get_gradients(context_id)[x].tolist()]


TORCH_HANGS = {"new_forward_after_backward"}


def _graph_local_and_remote(rpc: Any, dist_autograd: Any) -> Any:
    """A leaf used here and remotely: both contributions land in the context."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        loss = (x * 3).sum() + rpc.rpc_sync("w1", sum_twice, args=(x,))
        dist_autograd.backward(context_id, [loss])
        return dist_autograd.get_gradients(context_id)[x].tolist()


def _graph_scalar_root(rpc: Any, dist_autograd: Any) -> Any:
    """A 0-dim RPC result as the root."""
    x = torch.tensor(2.0, requires_grad=True)
    with dist_autograd.context() as context_id:
        root = rpc.rpc_sync("w1", torch.mul, args=(x, x))
        dist_autograd.backward(context_id, [root])
        return [facts(root), dist_autograd.get_gradients(context_id)[x].tolist()]


def _graph_zero_size(rpc: Any, dist_autograd: Any) -> Any:
    x = torch.tensor(2.0, requires_grad=True)
    empty = torch.empty(0, 3, requires_grad=True)
    with dist_autograd.context() as context_id:
        nothing = rpc.rpc_sync("w1", squared, args=(empty,))
        dist_autograd.backward(context_id, [x * 2 + nothing.sum()])
        grads = dist_autograd.get_gradients(context_id)
        return [facts(nothing), grads[x].tolist(), grad_facts(grads, empty)]


def _graph_non_leaf_sent(rpc: Any, dist_autograd: Any) -> Any:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", sum_twice, args=(x * 5,))])
        return dist_autograd.get_gradients(context_id)[x].tolist()


def _graph_parameter_sent(rpc: Any, dist_autograd: Any) -> Any:
    p = nn.Parameter(torch.tensor([1.0, 2.0]))
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", sum_twice, args=(p,))])
        grads = dist_autograd.get_gradients(context_id)
        return [
            grads[p].tolist() if p in grads else None,
            rpc.rpc_sync("w1", context_grad_count, args=(context_id,)),
        ]


def _graph_large(rpc: Any, dist_autograd: Any) -> Any:
    """Large tensors both ways (through shared memory on actormesh)."""
    x = torch.randn(LARGE, generator=torch.Generator().manual_seed(3), requires_grad=True)
    with dist_autograd.context() as context_id:
        result = rpc.rpc_sync("w1", squared, args=(x,))
        dist_autograd.backward(context_id, [(result * 3).sum()])
        grad = dist_autograd.get_gradients(context_id)[x]
        return [facts(grad), bool(torch.equal(grad, 6 * x.detach()))]


def _sparse(ns: Any) -> dict[str, Any]:
    """Sparse gradients: an nn.Embedding(sparse=True) on w1 trained with
    DistributedOptimizer, one here whose output w1 reduces, and a sparse leaf sent."""
    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    out: dict[str, Any] = {}
    indices = torch.tensor([1, 3, 3, 7])
    for sparse in (True, False):
        for optimizer_class in (torch.optim.SGD, torch.optim.Adagrad):
            table = rpc.remote("w1", embedding, args=(sparse,))
            params = rpc.rpc_sync("w1", module_param_rrefs, args=(table,))
            optimizer = ns.DistributedOptimizer(optimizer_class, params, lr=0.5)
            seen = []
            for _ in range(2):
                with dist_autograd.context() as context_id:
                    rows = rpc.rpc_sync("w1", embed, args=(table, indices))
                    dist_autograd.backward(context_id, [(rows * rows).sum()])
                    grad = rpc.rpc_sync("w1", module_weight_grad, args=(table, context_id))
                    optimizer.step(context_id)
                    seen.append([grad, rpc.rpc_sync("w1", module_weight, args=(table,))])
            out[f"remote_table_sparse_{sparse}_{optimizer_class.__name__}"] = seen
    local = embedding(True)
    with dist_autograd.context() as context_id:
        rows = local(indices)
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", sum_twice, args=(rows,))])
        out["local_table"] = grad_facts(dist_autograd.get_gradients(context_id), local.weight)
    leaf = cases()["sparse_coo"].requires_grad_()
    with dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [rpc.rpc_sync("w1", sparse_sum, args=(leaf,))])
        out["sparse_leaf_sent"] = grad_facts(dist_autograd.get_gradients(context_id), leaf)
    return out
