"""Torch tensors on the out-of-band path, loaded only when the program uses torch.

A CPU tensor is sent as its raw bytes in a ``PickleBuffer`` (a view of the tensor's memory,
no copy) plus dtype and shape; the receiver builds the tensor over the received buffer,
again without a copy. Tensors that need torch's own pickling (sparse, quantized, on a
device, subclasses) keep it.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch

__all__ = ["finish_tensor", "reduce_tensor"]


def reduce_tensor(obj: Any) -> Any:
    """The reduction of a plain dense CPU tensor; ``NotImplemented`` for anything else."""
    if type(obj) is not torch.Tensor and type(obj) is not torch.nn.Parameter:
        return NotImplemented
    tensor: torch.Tensor = obj
    if tensor.layout != torch.strided or tensor.device.type != "cpu" or tensor.is_quantized:
        return NotImplemented
    data = tensor.detach()
    if data.is_conj() or data.is_neg():
        # Lazy conjugate and negative views: their bytes are not their values.
        data = data.resolve_conj().resolve_neg()
    if not data.is_contiguous():
        data = data.contiguous()
    is_parameter = type(obj) is torch.nn.Parameter
    if data.numel() == 0:
        return _rebuild_empty, (data.dtype, tuple(data.shape), tensor.requires_grad, is_parameter)
    flat = data.reshape(-1)
    if flat.stride(0) != 1:
        # One element, contiguous by torch's rule, which ignores the strides of size-1
        # dimensions (``torch.ones(()).expand(1, 1)``, autograd's gradients): any stride
        # reads that element, and a byte view needs 1.
        flat = flat.as_strided((1,), (1,))
    raw = flat.view(torch.uint8).numpy()
    return _rebuild, (
        pickle.PickleBuffer(raw),  # type: ignore[arg-type]
        data.dtype,
        tuple(data.shape),
        tensor.requires_grad,
        is_parameter,
    )


def _rebuild(
    buffer: Any, dtype: torch.dtype, shape: tuple[int, ...], requires_grad: bool, param: bool
) -> torch.Tensor:
    view = buffer if type(buffer) is memoryview else memoryview(buffer)
    if view.readonly:
        # Buffers that came in-band (protocol < 5 consumers) are immutable: copy once.
        view = memoryview(bytearray(view))
    # Straight to the element type (a third of the cost of a byte tensor viewed as it);
    # one dimension needs no reshape.
    tensor = torch.frombuffer(view, dtype=dtype)
    if len(shape) != 1:
        tensor = tensor.reshape(shape)
    if requires_grad or param:
        return finish_tensor(tensor, requires_grad, param)
    return tensor


def _rebuild_empty(
    dtype: torch.dtype, shape: tuple[int, ...], requires_grad: bool, param: bool
) -> torch.Tensor:
    return finish_tensor(torch.empty(shape, dtype=dtype), requires_grad, param)


def finish_tensor(tensor: torch.Tensor, requires_grad: bool, param: bool) -> torch.Tensor:
    """``tensor`` as a Parameter, or requiring grad, as the sender's was."""
    if param:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor
