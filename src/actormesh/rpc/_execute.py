"""Running user functions on the callee: ``run`` (rpc_sync/rpc_async) and ``remote``.

Both decode the call on an RPC pool thread (so unpickling a large argument never stalls
the event loop), run the function inside the caller's autograd context, and report the
outcome. A function marked ``async_execution`` (or an ``RRef`` proxy call of such a
method) returns a future; the outcome is reported from that future's callback, with no
thread waiting for it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._agent import endpoint
from ._dist_autograd import Context, engine, running_in
from ._replies import encode_reply, failure_reply
from ._rref_table import OwnerEntry, owners
from ._wire import DecodeSession, decode

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = [
    "ASYNC_MARK",
    "Deferred",
    "function_name",
    "is_async_execution",
    "run_function",
]

# torch marks async_execution functions with this attribute; using the same one means a
# function decorated by either library is recognised by both.
ASYNC_MARK = "_wrapped_async_rpc_function"

# finish(ok, value or exception, context, function name)
Finish = Callable[[bool, Any, "Context | None", str], None]


def is_async_execution(fn: object) -> bool:
    """True if ``fn`` was decorated with ``async_execution`` (actormesh's or torch's)."""
    return getattr(fn, ASYNC_MARK, None) is not None


class Deferred:
    """A future whose value is the reply (async methods called through RRef proxies)."""

    __slots__ = ("future",)

    def __init__(self, future: Any) -> None:
        self.future = future


def function_name(fn: object) -> str:
    """A readable name of a callable, for messages."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else repr(fn)


def report_failure(state: RpcState, error: BaseException) -> None:
    """Write a failed RPC function's error to this (the callee's) stderr, as torch does:
    its callers get the error too, but the callee's log then shows what went wrong."""
    text = "".join(traceback.format_exception(error))
    with contextlib.suppress(Exception):
        print(f"On {state.me}:\n{error!r}\n{text}", file=sys.stderr, flush=True)


def run_function(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ctx: Context | None,
    finish: Finish,
) -> None:
    """Call ``fn`` in ``ctx`` and report its outcome once known (maybe later)."""
    name = function_name(fn)
    try:
        # A builtin (torch.add) runs as torch's RPC runs it: its TorchScript operator, whose
        # schemas decide which arguments it takes ("failed to match any schema").
        call = builtin_operator(fn) or fn
        with running_in(ctx):
            result = call(*args, **kwargs)
    except BaseException as error:
        finish(False, error, ctx, name)
        return
    if isinstance(result, Deferred):
        future = result.future
    elif is_async_execution(fn):
        future = result
    else:
        finish(True, result, ctx, name)
        return
    if not callable(getattr(future, "add_done_callback", None)):
        wrong = RuntimeError(
            "Functions decorated with @rpc.async_function must return a "
            f"torch.futures.Future object, but got {type(future)} (from {name})"
        )
        finish(False, wrong, ctx, name)
        return

    def completed(done: Any) -> None:
        try:
            value = done.wait() if hasattr(done, "wait") else done.result()
        except BaseException as error:
            finish(False, error, ctx, name)
        else:
            finish(True, value, ctx, name)

    future.add_done_callback(completed)


def builtin_operator(fn: object) -> Callable[..., Any] | None:
    """The TorchScript operator torch's RPC runs for a builtin such as ``torch.add``."""
    if "torch" not in sys.modules:
        return None
    import torch

    name = torch.jit._builtins._find_builtin(fn)  # type: ignore[no-untyped-call]
    return None if name is None else _operator(name)


@functools.cache
def _operator(name: str) -> Callable[..., Any]:
    import torch

    operator: Callable[..., Any] = torch._C._jit_get_operation(name)[0]
    return operator


def _execute(
    state: RpcState,
    src: int,
    context_id: int,
    key: Any,
    payload: Any,
    buffers: tuple[Any, ...],
    finish: Finish,
) -> None:
    """Decode a call from ``src`` (on a pool thread) and run it."""
    ctx = None
    try:
        eng = engine(state)
        ctx = eng.incoming(context_id, src)
        session = DecodeSession(state, src, eng.receiver(ctx, key, src))
        try:
            fn, args, kwargs = decode(payload, buffers, session)
        except (AttributeError, ImportError) as error:
            raise RuntimeError(
                "RPC pickler does not serialize function code. Ensure that UDFs are defined "
                f"on both caller and callee modules. ({type(error).__name__}: {error})"
            ) from error
        # As torch: the function sees the RRefs in its arguments confirmed by their owners.
        for confirmation in session.confirmations:
            confirmation.result()
    except BaseException as error:
        finish(False, error, ctx, "(unpickling the call)")
        return
    run_function(fn, args, kwargs, ctx, finish)


@endpoint("run", direct=True)
def _handle_run(
    state: RpcState,
    src: int,
    reply_id: int,
    context_id: int,
    key: Any,
    payload: Any,
    *buffers: Any,
) -> None:
    # The thread that finishes the call sends the reply itself: no hop through the loop.
    def finish(ok: bool, value: Any, ctx: Context | None, name: str) -> None:
        if not ok:
            report_failure(state, value)
        try:
            out = encode_reply(state, value, src, ctx) if ok else failure_reply(state, value, name)
        except BaseException as error:
            out = failure_reply(state, error, name)
        state.reply(src, reply_id, out)

    if state.closed:
        error = RuntimeError(f"RPC has shut down on worker {state.me.name!r}")
        state.reply(src, reply_id, failure_reply(state, error, "(the call)"))
        return
    try:
        state.pool.submit(_execute, state, src, context_id, key, payload, buffers, finish)
    except BaseException as error:
        state.reply(src, reply_id, failure_reply(state, error, "(the call)"))


@endpoint("remote")
def _handle_remote(
    state: RpcState,
    src: int,
    context_id: int,
    key: Any,
    rref_id: tuple[int, int],
    fork_id: tuple[int, int],
    payload: Any,
    *buffers: Any,
) -> Any:
    table = owners(state)
    entry = table.get_or_create(rref_id)
    table.add_fork(entry, fork_id, src)
    entry.created = True
    reply = state.loop.create_future()

    def finish(ok: bool, value: Any, ctx: Context | None, name: str) -> None:
        if ok:
            entry.set_value(value)
            state.resolve(reply, (True,))
        else:
            report_failure(state, value)
            entry.set_error(value)
            state.resolve(reply, failure_reply(state, value, name))

    state.pool.submit(_execute, state, src, context_id, key, payload, buffers, finish)
    return reply


def store_outcome(entry: OwnerEntry) -> Finish:
    """A ``finish`` that stores the outcome in ``entry`` (``remote`` to this worker)."""

    def finish(ok: bool, value: Any, ctx: Context | None, name: str) -> None:
        if ok:
            entry.set_value(value)
        else:
            entry.set_error(value)

    return finish
