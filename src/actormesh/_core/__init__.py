"""Layer 2: envelopes, serialization, mailboxes and the per-process runtime."""

from __future__ import annotations

from ._mailbox import EndpointKind, Hosted
from ._process import ChildProcess
from ._runtime import ReplyHandler, Runtime
from ._serialization import dumps, dumps_arguments, loads

__all__ = [
    "ChildProcess",
    "EndpointKind",
    "Hosted",
    "ReplyHandler",
    "Runtime",
    "dumps",
    "dumps_arguments",
    "loads",
]
