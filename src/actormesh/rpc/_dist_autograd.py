"""Distributed autograd: contexts, send/recv nodes, and the backward pass across workers.

The local part of every pass is torch's own distributed engine (the ``DistEngine`` behind
``torch.distributed.autograd.backward``), run on a torch context that shadows ours; this
module adds what torch does in its RPC agent, over actormesh's messages:

Forward: while a context is current, every RPC carries its id. A message that carries
tensors requiring grad gets a *send node* on the sender (``_SendBackward``, an autograd
function over the tensors sent) and a *recv node* per such tensor on the receiver
(``_RecvBackward``, the grad_fn of the tensor the receiver rebuilt), both under one
message key: the graph of a worker ends in recv nodes and starts at send nodes, as
torch's ends in ``RecvRpcBackward`` and starts at ``SendRpcBackward``.

Backward: a *pass* on one worker runs torch's engine from some roots in the worker's
torch context: the program's roots, or the send node of a message whose gradients just
arrived. Leaves accumulate into the context exactly as with torch (its
``AccumulateGrad`` capture hooks, so post hooks and DDP's reducer run, with the
context current: DDP's averaged gradients land in the context), never in ``.grad``.
Recv nodes hand their gradients to the pass, which sends them, per message, to the
worker that sent the tensors; that worker runs a pass from its send node. A worker
answers a gradient message only once every pass it caused has finished, so when
``backward`` returns on the root, the whole distributed backward has finished. The
graphs are kept (``retain_graph``) until the context is released, as one worker may
receive gradients for one message from several passes. Passes of one context run one
at a time on a worker (torch's engine allows one per context).

Release: leaving ``context()`` releases it here and on every worker it reached (each
forwards the release to the workers it reached); a dead worker's contexts are released
everywhere when its death is noticed.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future as ConcurrentFuture
from pickle import PickleBuffer
from typing import TYPE_CHECKING, Any

import torch
import torch._C._distributed_autograd as _torch_dist

from ._agent import endpoint
from ._wire import DecodeSession, EncodeSession, decode, encode

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = ["Context", "Engine", "current_context", "engine", "running_in"]

log = logging.getLogger("actormesh.rpc")

MsgKey = tuple[int, int]
# A recv node's gradient on its way back: (message key, sending worker, index, gradient).
Outgoing = tuple[MsgKey, int, int, torch.Tensor]

_current: contextvars.ContextVar[Context | None] = contextvars.ContextVar(
    "actormesh_rpc_autograd_context", default=None
)


def current_context() -> Context | None:
    """The distributed autograd context of the running code, if any."""
    return _current.get()


class running_in:
    """Make ``ctx`` the current context for a block (``None``: leave it as it is)."""

    __slots__ = ("_ctx", "_token")

    def __init__(self, ctx: Context | None) -> None:
        self._ctx = ctx
        self._token: contextvars.Token[Context | None] | None = None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._token = _current.set(self._ctx)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)


class Context:
    """One distributed autograd context as this worker knows it.

    Its gradients live in a torch context of this process (``torch_id``), made on the
    first pass that runs here: torch's engine accumulates into it.
    """

    __slots__ = (
        "collecting",
        "id",
        "known",
        "lock",
        "pass_lock",
        "released",
        "sends",
        "torch_id",
    )

    def __init__(self, context_id: int) -> None:
        self.id = context_id
        self.lock = threading.Lock()
        # One pass at a time: torch's engine refuses a second one on a context.
        self.pass_lock = threading.Lock()
        self.known: set[int] = set()
        self.sends: dict[MsgKey, torch.Tensor] = {}  # message key -> send node's output
        self.torch_id: int | None = None
        # Where recv nodes put their gradients while a pass runs (None between passes).
        self.collecting: list[Outgoing] | None = None
        self.released = False

    def gradients(self) -> dict[torch.Tensor, torch.Tensor]:
        """The gradients accumulated here, by leaf tensor."""
        torch_id = self.torch_id
        if torch_id is None or self.released:
            return {}
        grads: dict[torch.Tensor, torch.Tensor] = _torch_dist.get_gradients(torch_id)
        return grads

    # torch's DistAutogradContext spelling, for programs that inspect contexts.

    def _context_id(self) -> int:
        return self.id

    def _known_worker_ids(self) -> set[int]:
        return set(self.known)


class _SendBackward(torch.autograd.Function):
    """The send node of one message: its backward hands out the gradients that came back."""

    @staticmethod
    def forward(fctx: Any, *tensors: torch.Tensor) -> torch.Tensor:
        fctx.set_materialize_grads(False)
        fctx.incoming = ()
        return torch.zeros(())

    @staticmethod
    def backward(fctx: Any, _: Any) -> tuple[torch.Tensor | None, ...]:
        incoming: tuple[torch.Tensor | None, ...] = fctx.incoming
        return incoming


class _RecvBackward(torch.autograd.Function):
    """The recv node of one tensor of a message: its gradient goes back to the sender."""

    @staticmethod
    def forward(fctx: Any, ctx: Context, key: MsgKey, src: int, index: int, t: Any) -> Any:
        fctx.set_materialize_grads(False)
        fctx.route = (ctx, key, src, index)
        return t.detach()

    @staticmethod
    def backward(fctx: Any, grad: torch.Tensor | None) -> tuple[None, ...]:
        ctx, key, src, index = fctx.route
        sink = ctx.collecting
        if sink is None:
            raise RuntimeError(
                f"a tensor received in distributed autograd context {ctx.id} was "
                "differentiated outside a distributed backward pass of that context "
                "(use dist_autograd.backward, inside the context)"
                if not ctx.released
                else "Autograd context no longer valid! This usually means the autograd "
                f"context {ctx.id} was cleaned up before its backward pass reached this "
                "tensor"
            )
        if grad is not None:
            sink.append((key, src, index, grad))
        return (None, None, None, None, None)


class Engine:
    """This process' contexts and the passes that run on them."""

    def __init__(self, state: RpcState) -> None:
        self.state = state
        self.contexts: dict[int, Context] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._keys = itertools.count()
        # Contexts with backward work running here (root calls and incoming gradients),
        # with how much of it: torch counts one backward pass per context and worker.
        self._active: dict[int, int] = {}
        state.peer_listeners.append(self._peer_gone)
        _init_torch_container(state.me.id)

    # -- contexts -------------------------------------------------------------------------

    def new_context(self) -> Context:
        """A fresh context created by this worker (ids are unique across the group)."""
        ctx = Context((self.state.me.id << 48) | next(self._ids))
        with self._lock:
            self.contexts[ctx.id] = ctx
        return ctx

    def get(self, context_id: int) -> Context:
        """The context with this id; ``RuntimeError`` if this worker does not know it."""
        ctx = self.contexts.get(context_id)
        if ctx is None:
            raise RuntimeError(
                f"Could not find autograd context with id: {context_id} on worker "
                f"{self.state.me.name!r} (it was never used here, or it was released)"
            )
        return ctx

    def incoming(self, context_id: int, src: int) -> Context | None:
        """The context a message from ``src`` belongs to, created here on first contact."""
        if not context_id:
            return None
        with self._lock:
            ctx = self.contexts.get(context_id)
            if ctx is None:
                ctx = self.contexts[context_id] = Context(context_id)
        ctx.known.add(src)
        return ctx

    def release(self, context_id: int, origin: int | None = None) -> None:
        """Drop a context here and on every worker it reached (except ``origin``)."""
        with self._lock:
            ctx = self.contexts.pop(context_id, None)
        if ctx is None:
            return
        ctx.released = True
        for rank in list(ctx.known):
            if rank != origin and rank != self.state.me.id:
                self.state.post(rank, "ctx_release", (self.state.me.id, context_id))
        with ctx.lock:
            ctx.sends.clear()
            torch_id, ctx.torch_id = ctx.torch_id, None
        if torch_id is not None:
            _torch_dist._release_context(torch_id)

    def _peer_gone(self, rank: int, reason: str, died: bool) -> None:
        if not died:
            return
        with self._lock:
            orphans = [cid for cid in self.contexts if cid >> 48 == rank]
        for context_id in orphans:
            self.release(context_id, origin=rank)

    # -- recording ------------------------------------------------------------------------

    def record_send(self, ctx: Context, dest: int, tensors: list[torch.Tensor]) -> MsgKey | None:
        """Give tensors sent to ``dest`` a send node; returns the message key (None: none)."""
        ctx.known.add(dest)
        if not tensors:
            return None
        key = (self.state.me.id, next(self._keys))
        with torch.enable_grad():
            node = _SendBackward.apply(*tensors)  # type: ignore[no-untyped-call]
        with ctx.lock:
            ctx.sends[key] = node
        return key

    def receiver(
        self, ctx: Context | None, key: MsgKey | None, src: int
    ) -> Callable[[int, torch.Tensor], torch.Tensor] | None:
        """What the tensors of message ``key`` of ``src`` go through as they are rebuilt:
        each gets a recv node (``None`` when the message has none)."""
        if ctx is None or key is None:
            return None

        def receive(index: int, tensor: torch.Tensor) -> torch.Tensor:
            with torch.enable_grad():
                out: torch.Tensor = _RecvBackward.apply(  # type: ignore[no-untyped-call]
                    ctx, key, src, index, tensor.requires_grad_(True)
                )
            return out

        return receive

    # -- backward -------------------------------------------------------------------------

    def backward(self, context_id: int, roots: Sequence[torch.Tensor]) -> None:
        """Run the distributed backward pass from ``roots``; returns when it is done."""
        # torch's argument checks, with its messages.
        if not isinstance(context_id, int) or not isinstance(roots, Sequence):
            raise TypeError(
                "backward(): incompatible function arguments: expected (context_id: int, "
                f"roots: list[Tensor]), got ({type(context_id).__name__}, "
                f"{type(roots).__name__})"
            )
        ctx = self.get(context_id)
        if not roots:
            raise RuntimeError("No tensors provided for gradient computation.")
        for root in roots:
            if not isinstance(root, torch.Tensor):
                raise TypeError(
                    f"backward(): incompatible function arguments: roots must be tensors, "
                    f"not {type(root).__name__}"
                )
            if not root.requires_grad:
                raise RuntimeError(f"requires_grad not set on root: {root}")
            if root.numel() != 1:
                raise RuntimeError(
                    f"Tensor of shape {tuple(root.shape)} is not a scalar, all roots need to "
                    "be scalar"
                )
            if root.grad_fn is None:
                raise RuntimeError(
                    f"Tensor {root} does not have a valid gradient function. Please make sure "
                    "it is a result of differentiable operations"
                )
        self.count_pass(context_id, 1)
        try:
            for future in self.run_pass(ctx, list(roots)):
                future.result()
        finally:
            self.count_pass(context_id, -1)

    @property
    def passes(self) -> int:
        """Backward passes running on this worker (one per context)."""
        return len(self._active)

    def count_pass(self, context_id: int, change: int) -> None:
        """Backward work of a context starts (+1) or ends (-1) on this worker."""
        with self._lock:
            left = self._active.get(context_id, 0) + change
            if left > 0:
                self._active[context_id] = left
            else:
                self._active.pop(context_id, None)

    def run_pass(self, ctx: Context, roots: list[torch.Tensor]) -> list[ConcurrentFuture[None]]:
        """One local pass from scalar ``roots``; returns the gradient messages it sent."""
        with ctx.pass_lock:
            return self._pass(ctx, roots)

    def run_send_pass(
        self, ctx: Context, key: MsgKey, grads: dict[int, torch.Tensor]
    ) -> list[ConcurrentFuture[None]]:
        """The pass from message ``key``'s send node, for the gradients that came back."""
        with ctx.lock:
            node = ctx.sends.get(key)
        if node is None:
            raise RuntimeError(
                f"worker {self.state.me.name!r} has no record of message {key} in autograd "
                f"context {ctx.id}"
            )
        send_fn: Any = node.grad_fn
        with ctx.pass_lock:  # the node hands out what it holds to this pass only
            send_fn.incoming = tuple(grads.get(i) for i in range(len(send_fn.next_functions)))
            try:
                return self._pass(ctx, [node])
            finally:
                send_fn.incoming = ()

    def _pass(self, ctx: Context, roots: list[torch.Tensor]) -> list[ConcurrentFuture[None]]:
        # Holds ctx.pass_lock.
        sink: list[Outgoing] = []
        torch_id = self._torch_context(ctx)
        ctx.collecting = sink
        try:
            _torch_dist.backward(torch_id, roots, True)
        except RuntimeError as error:
            raise RuntimeError(_node_error(str(error), self.state.me.id)) from None
        finally:
            ctx.collecting = None
        outgoing: dict[MsgKey, tuple[int, dict[int, torch.Tensor]]] = {}
        for key, src, index, grad in sink:
            outgoing.setdefault(key, (src, {}))[1][index] = grad
        return [self._send_grads(ctx, src, key, g) for key, (src, g) in outgoing.items()]

    def _torch_context(self, ctx: Context) -> int:
        """The id of the torch context that holds ``ctx``'s gradients here (made once)."""
        with ctx.lock:
            if ctx.released:
                raise RuntimeError(f"autograd context {ctx.id} was released on this worker")
            if ctx.torch_id is None:
                ctx.torch_id = _new_torch_context()
            return ctx.torch_id

    def _send_grads(
        self, ctx: Context, dest: int, key: MsgKey, grads: dict[int, torch.Tensor]
    ) -> ConcurrentFuture[None]:
        state = self.state
        future: ConcurrentFuture[None] = ConcurrentFuture()
        payload, buffers = encode(grads, EncodeSession(state, dest))

        def done(ok: bool, value: Any) -> None:
            if ok:
                future.set_result(None)
            else:
                future.set_exception(_pass_error(value))

        state.request(
            dest,
            "grads",
            (state.me.id, ctx.id, key, PickleBuffer(payload), *buffers),
            done,
            what=f"distributed backward of context {ctx.id} on {state.workers[dest]}",
            timeout=state.rpc_timeout or None,
        )
        return future


def _init_torch_container(worker_id: int) -> None:
    """Make torch's context container usable here; its worker id only names errors."""
    try:
        _torch_dist._init(worker_id)
    except RuntimeError:
        # Already made for another rank of an earlier group in this process: its ids are
        # private to this process, so it serves as it is (errors are renamed, _node_error).
        log.debug("torch's autograd container was set up for another worker", exc_info=True)


def _new_torch_context() -> int:
    """A fresh torch context, made on a thread of its own.

    torch makes a new context the current one of the thread that makes it, and refuses a
    second on that thread until the first is released there: a thread that only makes it
    leaves no thread of ours holding one.
    """
    made: list[int] = []
    errors: list[BaseException] = []

    def make() -> None:
        try:
            made.append(_torch_dist._new_context()._context_id())
        except BaseException as error:
            errors.append(error)

    maker = threading.Thread(target=make, name="actormesh-autograd-context")
    maker.start()
    maker.join()
    if errors:
        raise errors[0]
    return made[0]


_NODE = re.compile(r"^Error on Node \d+: ")


def _node_error(message: str, node: int) -> str:
    """torch's "Error on Node N: ..." naming this worker, whatever rank torch's container
    was made for."""
    return _NODE.sub(f"Error on Node {node}: ", message, count=1)


def _pass_error(error: BaseException) -> BaseException:
    """What a failed remote pass makes this one fail with: the node's own error, unwrapped
    (each hop would otherwise nest the whole remote traceback again)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, RuntimeError) and str(cause).startswith("Error on Node "):
        return RuntimeError(str(cause))
    return error


def engine(state: RpcState) -> Engine:
    """The autograd engine of ``state``."""
    found: Engine = state.tables["autograd"]
    return found


# -- agent endpoints ------------------------------------------------------------------------


@endpoint("grads")
def _handle_grads(
    state: RpcState, src: int, context_id: int, key: MsgKey, payload: Any, *buffers: Any
) -> Any:
    reply = state.loop.create_future()
    eng = engine(state)
    eng.count_pass(context_id, 1)
    reply.add_done_callback(lambda _: eng.count_pass(context_id, -1))

    def job() -> None:
        try:
            ctx = eng.get(context_id)
            grads: dict[int, torch.Tensor] = decode(payload, buffers, DecodeSession(state, src))
            pending = eng.run_send_pass(ctx, key, grads)
        except BaseException as error:
            state.resolve(reply, error=error)
            return
        _when_all(state, reply, pending)

    state.pool.submit(job)
    return reply


def _when_all(state: RpcState, reply: Any, pending: list[ConcurrentFuture[None]]) -> None:
    if not pending:
        state.resolve(reply, None)
        return
    left = [len(pending)]
    lock = threading.Lock()

    def one_done(future: ConcurrentFuture[None]) -> None:
        error = future.exception()
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if error is not None:
            state.resolve(reply, error=error)
        elif last:
            state.resolve(reply, None)

    for future in pending:
        future.add_done_callback(one_done)


@endpoint("ctx_release")
def _handle_release(state: RpcState, src: int, context_id: int) -> None:
    engine(state).release(context_id, origin=src)
