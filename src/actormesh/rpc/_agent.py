"""The RPC agent: the actor each ``init_rpc`` process hosts, and its endpoint table.

Every message between RPC workers is a CALL frame to the destination's agent. The agent
is an ordinary hosted actor whose endpoints are all concurrent: each message starts at
once on the runtime's loop thread, where the handler does its bookkeeping synchronously
(so messages from one sender are registered in send order) and hands any user code to
the RPC thread pool. A handler returns ``None`` (done) or a loop future whose value is
the reply; no thread waits while, say, an ``async_execution`` function's future is
pending.

Modules register their handlers with ``@endpoint(name)``; ``_api`` imports them all.
Messages that arrive before this process has finished ``init_rpc`` wait for it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._core import EndpointKind
from .._exceptions import EndpointNotFoundError, MeshStoppedError

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = ["Agent", "endpoint"]

Handler = Callable[..., "asyncio.Future[Any] | None"]
# name -> (handler, counted, direct): counted messages take part in shutdown's quiescence
# check; direct handlers answer by themselves (``RpcState.reply``) and report their errors.
_ENDPOINTS: dict[str, tuple[Handler, bool, bool]] = {}


def endpoint(
    name: str, *, counted: bool = True, direct: bool = False
) -> Callable[[Handler], Handler]:
    """Register ``handler(state, *args)`` as the agent endpoint ``name``."""

    def register(handler: Handler) -> Handler:
        if name in _ENDPOINTS:
            raise ValueError(f"agent endpoint {name!r} is registered twice")
        _ENDPOINTS[name] = (handler, counted, direct)
        return handler

    return register


class Agent:
    """The hosted object behind a worker's RPC agent (the core's ``Hosted``).

    ``kind`` and ``invoke`` run on the runtime's loop thread.
    """

    def __init__(self) -> None:
        self.context = contextvars.copy_context()
        self.state: RpcState | None = None
        self._ready: asyncio.Future[None] | None = None

    def activate(self, state: RpcState) -> None:
        """Start serving with ``state`` (loop thread); releases messages that waited."""
        self.state = state
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    def kind(self, endpoint: str) -> EndpointKind:
        if endpoint not in _ENDPOINTS:
            raise EndpointNotFoundError(f"the RPC agent has no endpoint {endpoint!r}")
        return EndpointKind.CONCURRENT

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        state = self.state
        if state is None:
            return self._when_ready(endpoint, args)
        return _dispatch(state, endpoint, args)

    async def _when_ready(self, endpoint: str, args: tuple[Any, ...]) -> Any:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
        await self._ready
        assert self.state is not None
        return await _dispatch(self.state, endpoint, args)

    def close(self) -> None:
        self.state = None


def _dispatch(state: RpcState, endpoint: str, args: tuple[Any, ...]) -> Awaitable[Any]:
    handler, counted, direct = _ENDPOINTS[endpoint]
    if state.closed and counted and not direct:
        raise MeshStoppedError(f"RPC has shut down on worker {state.me.name!r}")
    result = handler(state, *args)
    if result is None:
        if counted:
            state.processed += 1
        return _done()
    # Tracked until answered, so that leaving the group answers whatever is still open.
    state.open_replies.add(result)
    result.add_done_callback(state.open_replies.discard)
    if counted:
        result.add_done_callback(lambda _: _count(state))
    return result


def _count(state: RpcState) -> None:
    state.processed += 1


async def _done() -> None:
    return None
