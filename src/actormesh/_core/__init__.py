"""Layer 2: envelopes, serialization, mailboxes and the per-process runtime (the processes
it owns are layer 3's: ``actormesh._hosts``)."""

from __future__ import annotations

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
    "loads",
    "new_event_loop",
]
