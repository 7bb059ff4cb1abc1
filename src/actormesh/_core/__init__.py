"""Layer 2: message headers, error payloads, serialization, mailboxes and the per-process
runtime (the processes it owns are layer 3's: ``actormesh._hosts``)."""

from __future__ import annotations

from . import _headers as headers
from ._error_payload import error_from_payload, error_payload, raised_error
from ._mailbox import EndpointKind, Hosted
from ._runtime import CoreRuntime, ReplyHandler, new_event_loop
from ._serialization import dumps, dumps_arguments, loads

__all__ = [
    "CoreRuntime",
    "EndpointKind",
    "Hosted",
    "ReplyHandler",
    "dumps",
    "dumps_arguments",
    "error_from_payload",
    "error_payload",
    "headers",
    "loads",
    "new_event_loop",
    "raised_error",
]
