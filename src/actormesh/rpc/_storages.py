"""Tensors of one RPC message that share a storage arrive sharing one, as with torch.

torch's RPC pickles a message's tensors with their storages, each storage once, so views
of one tensor in one message stay views of one received storage (an in-place change
through one shows through the others), with their offsets and strides. Before pickling
it copies a tensor that uses less than half of a storage of at least 8 KiB, so a small
view of a large tensor costs only its own elements. ``StorageTable`` follows both rules
for the dense CPU tensors of one message; anything else keeps actormesh's tensor path.
"""

from __future__ import annotations

from typing import Any

import torch

from .._core import finish_tensor

__all__ = ["StorageTable"]

# torch's rule (``cloneSparseTensors`` in its RPC wire format): a view is copied on its
# own when its storage is at least this large and at least this many times its bytes.
_RECOPY_MIN_BYTES = 8 * 1024
_RECOPY_MULTIPLE = 2


class StorageTable:
    """The storages met while pickling one message, each with the object that carries it.

    The carrier is the first tensor met that is its whole storage (it travels as any
    tensor does), else a byte tensor over the whole storage; later views name the carrier,
    which the pickler's memo sends once.
    """

    __slots__ = ("_carriers",)

    def __init__(self) -> None:
        self._carriers: dict[tuple[int, int], Any] = {}

    def reduce(self, tensor: torch.Tensor) -> Any:
        """The reduction of a dense CPU tensor with elements; ``NotImplemented`` when the
        tensor is a whole storage met first, which actormesh's own path sends."""
        if tensor.is_conj() or tensor.is_neg() or tensor.__dict__:
            # A lazy view whose bytes are not its values, or a tensor with attributes:
            # actormesh's path sends it as a plain tensor, which comes back here.
            return NotImplemented
        storage = tensor.untyped_storage()
        size = storage.nbytes()
        used = tensor.numel() * tensor.element_size()
        if size >= _RECOPY_MIN_BYTES and size >= _RECOPY_MULTIPLE * used:
            return _copied(tensor)
        key = (storage.data_ptr(), size)
        carrier = self._carriers.get(key)
        if carrier is tensor:
            return NotImplemented  # the byte carrier itself, being pickled
        if carrier is None:
            if used == size and tensor.storage_offset() == 0 and tensor.is_contiguous():
                self._carriers[key] = tensor
                return NotImplemented
            carrier = torch.empty(0, dtype=torch.uint8).set_(storage)
            self._carriers[key] = carrier
        return _as_view(carrier, tensor, tensor)


def _copied(tensor: torch.Tensor) -> Any:
    # torch's clone keeps the strides of a dense view (a transposed block stays
    # transposed) and makes any other contiguous.
    copy = tensor.detach().clone()
    return _as_view(copy.reshape(-1) if copy.is_contiguous() else _span(copy), copy, tensor)


def _as_view(carrier: torch.Tensor, view: torch.Tensor, original: torch.Tensor) -> Any:
    """The reduction rebuilding ``view`` over ``carrier``'s storage, as ``original`` was
    (requiring grad, a Parameter)."""
    return _view_of, (
        carrier,
        view.dtype,
        view.storage_offset(),
        tuple(view.shape),
        tuple(view.stride()),
        original.requires_grad,
        type(original) is torch.nn.Parameter,
    )


def _span(dense: torch.Tensor) -> torch.Tensor:
    # A non-overlapping dense tensor covers exactly its elements, from its offset on.
    return dense.as_strided((dense.numel(),), (1,), dense.storage_offset())


def _view_of(
    carrier: torch.Tensor,
    dtype: torch.dtype,
    offset: int,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    requires_grad: bool,
    param: bool,
) -> torch.Tensor:
    view = torch.empty(0, dtype=dtype).set_(carrier.untyped_storage(), offset, shape, stride)
    return finish_tensor(view, requires_grad, param)
