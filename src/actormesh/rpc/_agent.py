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
import contextlib
import contextvars
import functools
from collections.abc import Callable
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
        # Messages that came before ``activate``, in arrival order, with their answers.
        self._early: list[tuple[str, tuple[Any, ...], asyncio.Future[Any]]] = []
        self._closed = False

    def activate(self, state: RpcState) -> None:
        """Start serving with ``state`` (loop thread).

        Messages that came first are handled here, in arrival order, before any later
        one: a later message must never overtake them (a call that passes an RRef would
        otherwise reach the owner before the ``remote`` that created it).
        """
        early, self._early = self._early, []
        for endpoint, args, answer in early:
            try:
                outcome = _dispatch(state, endpoint, args)
            except BaseException as error:
                answer.set_exception(error)
                continue
            if outcome is None:
                answer.set_result(None)
            else:
                outcome.add_done_callback(functools.partial(_relay, answer))
        self.state = state

    def kind(self, endpoint: str) -> EndpointKind:
        if endpoint not in _ENDPOINTS:
            raise EndpointNotFoundError(f"the RPC agent has no endpoint {endpoint!r}")
        return EndpointKind.CONCURRENT

    def invoke(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        state = self.state
        if state is None:
            if self._closed:
                # Left the group: answer at once (a peer's shutdown barrier or watch must
                # not wait for an agent that will never serve again).
                raise MeshStoppedError("RPC has shut down on this worker")
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._early.append((endpoint, args, answer))
            return answer
        outcome = _dispatch(state, endpoint, args)
        return _done() if outcome is None else outcome

    # Its endpoints run on the process' loop, where the RPC state lives (a task each).
    process_loop = True

    def close(self, error: BaseException | None = None, on_loop: Any = None) -> None:
        self._closed = True
        self.state = None
        early, self._early = self._early, []
        for _, _, answer in early:  # any thread: their loop fails them
            with contextlib.suppress(RuntimeError):
                answer.get_loop().call_soon_threadsafe(_never_started, answer)


def _dispatch(state: RpcState, endpoint: str, args: tuple[Any, ...]) -> asyncio.Future[Any] | None:
    """Run the handler; its reply future, or ``None`` when it is done already."""
    handler, counted, direct = _ENDPOINTS[endpoint]
    if state.closed and counted and not direct:
        raise MeshStoppedError(f"RPC has shut down on worker {state.me.name!r}")
    result = handler(state, *args)
    if result is None:
        if counted:
            state.processed += 1
        return None
    # Tracked until answered, so that leaving the group answers whatever is still open.
    state.open_replies.add(result)
    result.add_done_callback(state.open_replies.discard)
    if counted:
        result.add_done_callback(lambda _: _count(state))
    return result


def _never_started(answer: asyncio.Future[Any]) -> None:
    if not answer.done():
        answer.set_exception(MeshStoppedError("the RPC agent stopped before it started"))


def _relay(answer: asyncio.Future[Any], done: asyncio.Future[Any]) -> None:
    if answer.done():
        return
    if done.cancelled():
        answer.cancel()
    elif done.exception() is not None:
        answer.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        answer.set_result(done.result())


def _count(state: RpcState) -> None:
    state.processed += 1


async def _done() -> None:
    return None
