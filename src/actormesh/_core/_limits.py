"""The message size limit, enforced by senders.

A receiver treats a frame over ``Config.max_message_bytes`` as a protocol error and drops
the connection, which would look like the death of every actor behind it. Senders check
first, so an oversized message is an error for whoever sent it, and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._exceptions import MessageTooLargeError

__all__ = ["check_message_size", "message_size"]


def message_size(parts: Sequence[Any]) -> int:
    """Bytes in a message's parts (bytes, buffers, ``PickleBuffer`` objects)."""
    total = 0
    for part in parts:
        total += len(part) if type(part) is bytes else memoryview(part).nbytes
    return total


def check_message_size(parts: Sequence[Any], limit: int, what: str) -> None:
    """Raise ``MessageTooLargeError`` naming ``what`` when ``parts`` exceed ``limit``."""
    size = message_size(parts)
    if size > limit:
        raise MessageTooLargeError(
            f"{what} is {size} bytes, over the limit of {limit} bytes "
            "(Config.max_message_bytes, ACTORMESH_MAX_MESSAGE_BYTES); nothing was sent"
        )
