"""Tensors of every kind, and what the fidelity tests compare about one: shared by the
actor-endpoint tests (``tests/integration/test_tensor_fidelity.py``) and the RPC tests
(``tests/rpc/test_numerics.py``). Their conftests put this folder on ``PYTHONPATH``, so
the workers import it by name too.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import torch
from torch import nn

__all__ = ["LARGE", "cases", "digest", "facts"]

# A tensor above this many bytes crosses actormesh's shared-memory threshold (1 MiB).
LARGE = 600_000  # float32 elements: 2.4 MB


def digest(t: torch.Tensor) -> str:
    """The tensor's values as bytes, hashed (exact: two tensors with the same digest, dtype
    and shape hold the same values)."""
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_quantized:
        t = t.int_repr()
    t = t.resolve_conj().resolve_neg().contiguous()
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return hashlib.sha1(raw.numpy().tobytes()).hexdigest()[:16]


def facts(t: Any) -> dict[str, Any]:
    """Everything the tests compare about one tensor, as plain data."""
    if not isinstance(t, torch.Tensor):
        return {"type": type(t).__name__, "repr": repr(t)[:80]}
    seen: dict[str, Any] = {
        "type": type(t).__name__,
        "dtype": str(t.dtype),
        "shape": list(t.shape),
        "layout": str(t.layout),
        "requires_grad": t.requires_grad,
        "is_leaf": t.is_leaf,
        "grad_fn": t.grad_fn is not None,
        "values": digest(t),
        "hooks": bool(t._backward_hooks),
        "dot_grad": t.is_leaf and t.grad is not None,
    }
    if t.__dict__:
        seen["attributes"] = {key: repr(value) for key, value in t.__dict__.items()}
    if t.is_quantized:
        seen["qscheme"] = [str(t.qscheme()), float(t.q_scale()), int(t.q_zero_point())]
    if t.layout == torch.strided:
        seen["stride"] = list(t.stride())
        seen["contiguous"] = t.is_contiguous()
        if t.dim() == 4:
            seen["channels_last"] = t.is_contiguous(memory_format=torch.channels_last)
        seen["conj_neg"] = [t.is_conj(), t.is_neg()]
    elif t.layout == torch.sparse_coo:
        seen["coalesced"] = t.is_coalesced()
        seen["nnz"] = t._nnz()
    return seen


def cases() -> dict[str, torch.Tensor]:
    """Every kind of tensor the fidelity tests send, built from fixed seeds: the same in
    every process that builds them."""
    with warnings.catch_warnings():
        # torch's notes on sparse invariants, CSR being beta and quantization's future
        warnings.simplefilter("ignore", UserWarning)
        return _cases()


def _cases() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    c: dict[str, torch.Tensor] = {}
    # Layouts of dense tensors.
    c["contiguous"] = randn(3, 4)
    c["transposed"] = randn(3, 4).t()
    c["channels_last"] = randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    c["channels_last_3d"] = randn(2, 3, 2, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    c["permuted"] = randn(2, 3, 4).permute(2, 0, 1)
    c["expanded"] = randn(1, 4).expand(3, 4)
    c["expanded_scalar"] = torch.tensor(2.5).expand(5)
    c["column_view"] = randn(4, 5)[:, 2]
    c["step_slice"] = torch.arange(20.0)[::3]
    c["offset_view"] = randn(6, 4)[2:]
    c["size1_odd_stride"] = randn(4, 1).t()  # (1, 4): strides of a size-1 dim are free
    # Views of large storages (torch's RPC copies a view using under half of >= 8 KiB).
    big = randn(2048, 8)
    c["big_column"] = big[:, 3]
    c["big_rows"] = big[10:20]
    c["big_block_t"] = big[10:20].t()
    c["big_half"] = big[:1500]
    # Element types.
    for dtype in (
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
        torch.complex128,
    ):
        name = str(dtype).removeprefix("torch.")
        values = randn(2, 3) * 10
        if dtype.is_complex:
            made = torch.complex(values, randn(2, 3)).to(dtype)
        elif dtype == torch.bool:
            made = values > 0
        else:
            made = values.to(dtype)
        c[name] = made
        c[f"{name}_transposed"] = made.t()
    c["conj_view"] = torch.complex(randn(3), randn(3)).conj()
    c["neg_view"] = torch._neg_view(torch.complex(randn(3), randn(3)))
    # Edge sizes.
    c["empty"] = torch.empty(0)
    c["empty_0x3"] = torch.empty(0, 3)
    c["empty_3x0_t"] = torch.empty(3, 0).t()
    c["empty_int"] = torch.empty(2, 0, dtype=torch.int64)
    c["scalar"] = torch.tensor(3.5)
    c["scalar_int"] = torch.tensor(7)
    c["scalar_bool"] = torch.tensor(True)
    c["scalar_f64"] = torch.tensor(1.25, dtype=torch.float64)
    c["one_element"] = torch.tensor([4.0])
    c["large"] = randn(LARGE)
    c["large_transposed"] = randn(600, 1000).t()
    c["large_channels_last"] = randn(4, 16, 96, 100).contiguous(memory_format=torch.channels_last)
    c["large_column"] = randn(LARGE, 2)[:, 1]
    c["large_f16"] = randn(LARGE * 2).half()
    # Autograd state.
    c["requires_grad"] = randn(3).requires_grad_()
    c["non_leaf"] = randn(3).requires_grad_() * 2
    c["transposed_requires_grad"] = randn(3, 4).t().requires_grad_()
    c["parameter"] = nn.Parameter(randn(3))
    c["parameter_frozen"] = nn.Parameter(randn(3), requires_grad=False)
    c["parameter_transposed"] = nn.Parameter(randn(3, 4).t())
    hooked = randn(3).requires_grad_()
    hooked.register_hook(lambda grad: grad * 2)
    c["hooked"] = hooked
    graded = randn(3).requires_grad_()
    graded.grad = torch.ones(3)
    c["with_dot_grad"] = graded
    tagged = randn(3)
    tagged.tag = "mine"
    c["with_attribute"] = tagged
    tagged_param = nn.Parameter(randn(3))
    tagged_param.tag = "param"
    c["parameter_with_attribute"] = tagged_param
    c["conj_imag_neg"] = torch.complex(randn(3), randn(3)).conj().imag
    c["conj_transposed"] = torch.complex(randn(3, 2), randn(3, 2)).conj().t()
    # Other layouts and kinds.
    indices = torch.tensor([[0, 1, 1, 2], [2, 0, 0, 1]])
    c["sparse_coo"] = torch.sparse_coo_tensor(indices, randn(4), (3, 3)).coalesce()
    c["sparse_coo_uncoalesced"] = torch.sparse_coo_tensor(indices, randn(4), (3, 3))
    c["sparse_coo_hybrid"] = torch.sparse_coo_tensor(indices[:, :2], randn(2, 2), (3, 3, 2))
    c["sparse_csr"] = randn(3, 4).relu().to_sparse_csr()
    c["quantized"] = torch.quantize_per_tensor(randn(4), 0.1, 3, torch.quint8)
    # Through actor endpoints as well: a view of a channels_last tensor, a large expand.
    c["channels_last_sliced"] = c["channels_last"][:, :, 1:3]
    c["large_expanded"] = randn(1, 1000).expand(1000, 1000)
    return c
