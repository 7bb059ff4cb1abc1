"""How RPC payloads are pickled, on top of actormesh's serialization.

Three things differ from a plain actor call, and each is a hook in the pickler:

- An ``RRef`` in a message forks: the sender registers the new reference before the
  message leaves (see ``_rref_table``). Types register such reducers with
  ``register_reducer``.
- Inside a distributed autograd context, every tensor that requires grad is recorded by
  the sender and marked in the pickle, so the receiver puts the tensor it rebuilds behind
  a recv node: that send/recv pair is how gradients later flow back (see
  ``_dist_autograd``).
- Functions and classes of the main script travel by name, as with torch (the receiver
  uses its own ``__main__``/``__mp_main__`` object, so ``isinstance`` and module globals
  behave as in the sender's program), with their code by value as a fallback for a
  receiver that runs another script.

Receiving runs ``decode`` with a ``DecodeSession`` that the rebuild functions consult.
"""

from __future__ import annotations

import io
import pickle
import sys
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._core import Pickler, reduce_tensor
from .._exceptions import SerializationError
from ._storages import StorageTable

__all__ = [
    "DecodeSession",
    "EncodeSession",
    "FuturePickleError",
    "current_decode",
    "decode",
    "encode",
    "register_reducer",
]

Reducer = Callable[[Any, "EncodeSession"], Any]
_reducers: dict[type, Reducer] = {}


class FuturePickleError(SerializationError, RuntimeError):
    """A ``torch.futures.Future`` was to be sent in an RPC (torch's RuntimeError)."""


FuturePickleError.__module__ = "actormesh.rpc._wire"


def register_reducer(cls: type, reducer: Reducer) -> None:
    """Pickle instances of exactly ``cls`` with ``reducer(obj, session)`` inside RPCs."""
    _reducers[cls] = reducer


class EncodeSession:
    """One message being pickled.

    Attributes:
        dest: id of the receiving worker.
        state: the process' RPC state (for reducers that register forks).
        ctx: the distributed autograd context recording this message, or ``None``.
        grad_tensors: tensors requiring grad met while pickling (only with ``ctx``).
        rollbacks: undo actions for registrations made while pickling, run when the
            message is not sent after all.
    """

    __slots__ = ("ctx", "dest", "grad_tensors", "rollbacks", "state")

    def __init__(self, state: Any, dest: int, ctx: Any = None) -> None:
        self.state = state
        self.dest = dest
        self.ctx = ctx
        self.grad_tensors: list[Any] = []
        self.rollbacks: list[Callable[[], None]] = []

    def rollback(self) -> None:
        """The message will not be sent: undo what pickling registered."""
        rollbacks, self.rollbacks = self.rollbacks, []
        for undo in rollbacks:
            undo()


class DecodeSession:
    """One message being unpickled.

    Attributes:
        src: id of the sending worker.
        state: the process' RPC state.
        receive: what a tensor the sender recorded for distributed autograd becomes here,
            given its index in the message and the tensor rebuilt (``None``: outside a
            context, it is the rebuilt tensor, requiring grad).
        confirmations: futures of the RRef forks rebuilt here that the owner has yet to
            confirm.
    """

    __slots__ = ("confirmations", "receive", "src", "state")

    def __init__(
        self, state: Any, src: int, receive: Callable[[int, Any], Any] | None = None
    ) -> None:
        self.state = state
        self.src = src
        self.receive = receive
        self.confirmations: list[Any] = []


class _RpcPickler(Pickler):
    def __init__(
        self, file: io.BytesIO, session: EncodeSession, buffers: list[pickle.PickleBuffer]
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffers.append)
        self.session = session
        self.storages = StorageTable()

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        special = _reducers.get(kind)
        if special is not None:
            return special(obj, self.session)
        session = self.session
        if kind.__module__.startswith("torch"):
            import torch

            if isinstance(obj, torch._C.Future):
                raise FuturePickleError(
                    "Can not pickle torch.futures.Future: a future only exists where it "
                    "was made (return its value, or use async_execution)"
                )
            if kind is torch.Tensor or kind is torch.nn.Parameter:
                if session.ctx is not None and obj.requires_grad:
                    index = len(session.grad_tensors)
                    session.grad_tensors.append(obj)
                    return _recv_grad_tensor, (index, obj.detach(), obj.__dict__ or None)
                if (
                    obj.layout == torch.strided
                    and obj.device.type == "cpu"
                    and not obj.is_quantized
                    and obj.numel()
                ):
                    shared = self.storages.reduce(obj)
                    if shared is not NotImplemented:
                        return shared
                # As torch's RPC, without torch's pickle's warning about hooks: in a
                # context they stay with the sender, and work there.
                return reduce_tensor(obj, warn_hooks=False)
        if kind is types.FunctionType or isinstance(obj, type):
            module = getattr(obj, "__module__", None)
            if module in ("__main__", "__mp_main__") and "<" not in obj.__qualname__:
                return _main_object, (obj.__qualname__, _by_value(obj))
        return super().reducer_override(obj)


def encode(obj: Any, session: EncodeSession) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Pickle ``obj`` for ``session.dest``; on failure, undo registrations and raise.

    Raises:
        SerializationError: something in ``obj`` cannot be pickled.
    """
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    try:
        _RpcPickler(stream, session, buffers).dump(obj)
    except BaseException as error:
        session.rollback()
        if isinstance(error, SerializationError) or not isinstance(error, Exception):
            raise
        raise SerializationError(
            f"cannot pickle {type(obj).__name__} for an RPC: {type(error).__name__}: {error}"
        ) from error
    return stream.getvalue(), buffers


_decoding = threading.local()


def decode(payload: Any, buffers: Any, session: DecodeSession) -> Any:
    """Unpickle a message encoded by ``encode``, in ``session``."""
    previous = getattr(_decoding, "session", None)
    _decoding.session = session
    try:
        return pickle.loads(payload, buffers=buffers)
    finally:
        _decoding.session = previous


def current_decode() -> DecodeSession | None:
    """The session of the message being unpickled on this thread, if any."""
    return getattr(_decoding, "session", None)


def _recv_grad_tensor(index: int, tensor: Any, state: dict[str, Any] | None = None) -> Any:
    session = current_decode()
    if session is None or session.receive is None:
        received = tensor.requires_grad_(True)
    else:
        received = session.receive(index, tensor)
    if state:
        received.__dict__.update(state)
    return received


# -- objects of the main script ---------------------------------------------------------

_by_value_lock = threading.Lock()
_by_value_cache: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
_loaded_lock = threading.Lock()
_loaded: OrderedDict[bytes, Any] = OrderedDict()
_LOADED_MAX = 256


def _by_value(obj: Any) -> bytes:
    with _by_value_lock:
        blob = _by_value_cache.get(obj)
    if blob is None:
        import cloudpickle

        try:
            blob = cloudpickle.dumps(obj, protocol=5)
        except Exception:
            blob = b""  # the receiver must then find it by name
        with _by_value_lock:
            _by_value_cache[obj] = blob
    return blob


def _main_object(qualname: str, blob: bytes) -> Any:
    for name in ("__main__", "__mp_main__"):
        found: Any = sys.modules.get(name)
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is not None and getattr(found, "__qualname__", None) == qualname:
            return found
    if not blob:
        raise AttributeError(
            f"{qualname} is not defined in this worker's main script, and it could not be "
            "pickled by value by the sender"
        )
    # Not in this process' main script: use the code that came with it (cached, so a
    # class keeps one identity across messages).
    with _loaded_lock:
        obj = _loaded.get(blob)
        if obj is not None:
            _loaded.move_to_end(blob)
            return obj
    obj = pickle.loads(blob)
    with _loaded_lock:
        _loaded[blob] = obj
        while len(_loaded) > _LOADED_MAX:
            _loaded.popitem(last=False)
    return obj
