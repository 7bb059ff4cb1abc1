"""Torch tensors on the out-of-band path, loaded only when the program uses torch.

A CPU tensor is sent as its raw bytes in a ``PickleBuffer`` (a view of the tensor's memory,
no copy) plus dtype, shape and strides; the receiver builds the tensor over the received
buffer, again without a copy. Tensors that need torch's own pickling (sparse, quantized,
on a device, subclasses) keep it.

What arrives is what a local call would have been given, as far as a copy can be: the
same values, dtype, shape and strides (a transposed or ``channels_last`` tensor stays so;
the strides of size-1 dimensions are kept), the lazy conjugate and negative bits,
``requires_grad``, ``nn.Parameter`` and the tensor's Python attributes. A view with gaps
(a column, a strided slice) or overlaps (``expand``) travels as the span of memory it
covers, with its strides, unless it uses less than half of a span of at least 8 KiB:
then it travels as a copy of its own elements (``clone()``: dense, in the memory format
torch suggests), torch RPC's rule for small views of large storages. A copy cannot keep
what ties a tensor to the sender's process: its autograd graph (a tensor requiring grad
arrives as a leaf, as with torch's pickle), its hooks (dropped with torch's pickle's
warning), ``.grad``, and sharing memory with other tensors.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch

__all__ = ["finish_tensor", "reduce_tensor"]

# torch RPC's rule for views (``cloneSparseTensors``): a view is copied on its own when
# the memory it spans is at least this large and at least this many times its bytes.
_RECOPY_MIN_BYTES = 8 * 1024
_RECOPY_MULTIPLE = 2


def reduce_tensor(obj: Any, warn_hooks: bool = True) -> Any:
    """The reduction of a plain dense CPU tensor; ``NotImplemented`` for anything else.

    ``warn_hooks``: warn, as torch's pickle does, that the tensor's backward hooks are not
    sent (the RPC layer keeps them working on the sender, and does not warn).
    """
    kind = type(obj)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        return NotImplemented
    tensor: torch.Tensor = obj
    if tensor.layout != torch.strided or tensor.device.type != "cpu" or tensor.is_quantized:
        return NotImplemented
    is_parameter = kind is torch.nn.Parameter
    if warn_hooks and tensor._backward_hooks:
        torch.utils.hooks.warn_if_has_hooks(tensor)
    state = obj.__dict__
    if state or tensor.is_conj() or tensor.is_neg():
        # Sent as a plain tensor over the same memory (pickled by this reducer, so views
        # keep sharing where the pickler shares them), then dressed as the original.
        plain = tensor.detach()
        if plain.is_neg():
            plain = torch._neg_view(plain)
        if plain.is_conj():
            plain = plain.conj()
        return _dressed, (
            plain,
            tensor.is_conj(),
            tensor.is_neg(),
            tensor.requires_grad,
            is_parameter,
            dict(state) if state else None,
        )
    data = tensor.detach()
    shape = tuple(data.shape)
    if data.numel() == 0:
        return _rebuild_empty, (
            data.dtype,
            shape,
            tensor.requires_grad,
            is_parameter,
            data.stride(),
        )
    stride: tuple[int, ...] | None = None
    if data.is_contiguous():
        if 1 in shape and data.stride() != _contiguous_strides(shape):
            stride = tuple(data.stride())  # torch's rule ignores size-1 dimensions
        flat = data.reshape(-1)
        if flat.stride(0) != 1:
            # One element whose size-1 dimensions have other strides (``expand(1, 1)``,
            # autograd's gradients): any stride reads that element, a byte view needs 1.
            flat = flat.as_strided((1,), (1,))
    else:
        stride = tuple(data.stride())
        span = _span(shape, stride)
        if span != data.numel():  # gaps or overlaps
            nbytes = span * data.element_size()
            if nbytes >= _RECOPY_MIN_BYTES and span >= _RECOPY_MULTIPLE * data.numel():
                data = data.clone()  # torch's copy: dense, strides as torch suggests
                stride = tuple(data.stride())
                span = data.numel()
        # The memory the tensor covers, from its offset on, in memory order.
        flat = data.as_strided((span,), (1,), data.storage_offset())
    raw = flat.view(torch.uint8).numpy()
    return _rebuild, (
        pickle.PickleBuffer(raw),  # type: ignore[arg-type]
        data.dtype,
        shape,
        tensor.requires_grad,
        is_parameter,
        stride,
    )


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """The number of elements from a (non-empty) tensor's first to its last, inclusive."""
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def _rebuild(
    buffer: Any,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    requires_grad: bool,
    param: bool,
    stride: tuple[int, ...] | None = None,
) -> torch.Tensor:
    view = buffer if type(buffer) is memoryview else memoryview(buffer)
    if view.readonly:
        # Buffers that came in-band (protocol < 5 consumers) are immutable: copy once.
        view = memoryview(bytearray(view))
    # Straight to the element type (a third of the cost of a byte tensor viewed as it);
    # one dimension needs no reshape.
    tensor = torch.frombuffer(view, dtype=dtype)
    if stride is not None:
        tensor = tensor.as_strided(shape, stride)
    elif len(shape) != 1:
        tensor = tensor.reshape(shape)
    if requires_grad or param:
        return finish_tensor(tensor, requires_grad, param)
    return tensor


def _rebuild_empty(
    dtype: torch.dtype,
    shape: tuple[int, ...],
    requires_grad: bool,
    param: bool,
    stride: tuple[int, ...] | None = None,
) -> torch.Tensor:
    if stride is None:
        tensor = torch.empty(shape, dtype=dtype)
    else:
        tensor = torch.empty_strided(shape, stride, dtype=dtype)
    return finish_tensor(tensor, requires_grad, param)


def _dressed(
    plain: torch.Tensor,
    conj: bool,
    neg: bool,
    requires_grad: bool,
    param: bool,
    state: dict[str, Any] | None,
) -> torch.Tensor:
    """``plain`` with the lazy bits, autograd flag, type and attributes of the original."""
    tensor = plain
    if neg:
        tensor = torch._neg_view(tensor)
    if conj:
        tensor = tensor.conj()
    tensor = finish_tensor(tensor, requires_grad, param)
    if state:
        tensor.__dict__.update(state)
    return tensor


def finish_tensor(tensor: torch.Tensor, requires_grad: bool, param: bool) -> torch.Tensor:
    """``tensor`` as a Parameter, or requiring grad, as the sender's was."""
    if param:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor
