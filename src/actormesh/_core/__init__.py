"""Layer 2: message headers, error payloads, serialization, mailboxes and the per-process
runtime (the processes it owns are layer 3's: ``actormesh._hosts``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _headers as headers
from . import _metrics as metrics
from . import _otel as otel
from ._debugger import debug
from ._debugger import install as install_breakpoints
from ._deferral import Deferrals, Resume
from ._error_payload import error_from_payload, error_payload, raised_error
from ._inspect import explain
from ._limits import check_message_size
from ._mailbox import CURRENT_MESSAGE, BuildOnLoop, EndpointKind, Hosted
from ._metrics import record_metric
from ._owner import NO_PROCESSES, ProcessOwner
from ._reply_routes import ReplyRoute
from ._runtime import CoreRuntime, ReplyHandler, new_event_loop
from ._serialization import Pickler, dumps, dumps_arguments, loads
from ._snapshot import observe, process_usage
from ._timeline import RECORDER, Span

__all__ = [
    "BuildOnLoop",
    "CURRENT_MESSAGE",
    "CoreRuntime",
    "Deferrals",
    "EndpointKind",
    "Hosted",
    "NO_PROCESSES",
    "Pickler",
    "ProcessOwner",
    "RECORDER",
    "ReplyHandler",
    "ReplyRoute",
    "Resume",
    "Span",
    "check_message_size",
    "debug",
    "dumps",
    "dumps_arguments",
    "error_from_payload",
    "error_payload",
    "explain",
    "finish_tensor",
    "headers",
    "install_breakpoints",
    "loads",
    "metrics",
    "new_event_loop",
    "observe",
    "otel",
    "process_usage",
    "raised_error",
    "record_metric",
    "reduce_tensor",
]

if TYPE_CHECKING:
    from ._tensors import finish_tensor, reduce_tensor

# Names whose module imports torch: loaded when first asked for (by actormesh.rpc), so
# a worker that never handles a tensor never imports torch.
_LAZY = {"finish_tensor": "_tensors", "reduce_tensor": "_tensors"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)
