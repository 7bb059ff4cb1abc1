"""The event loops of a process: the runtime's and each actor's, of the configured kind."""

from __future__ import annotations

import asyncio

from .._config import Config

__all__ = ["new_event_loop"]


def new_event_loop(config: Config) -> asyncio.AbstractEventLoop:
    """A new loop of the configured kind (uvloop when asked for and installed)."""
    if config.event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
