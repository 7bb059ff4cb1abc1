"""Distributed autograd: contexts, send/recv records, and the backward pass across workers.

Forward: while a context is current, every RPC carries its id. A message that carries
tensors requiring grad is recorded on both sides under one message key: the sender keeps
the tensors it sent ("send"), the receiver keeps the leaf tensors it rebuilt ("recv").
Replies are recorded the same way, so a worker's graph ends in recv leaves and starts at
send tensors.

Backward: a *pass* on one worker takes some tensors and their gradients, finds the leaves
they reach, and computes the leaves' gradients with ``torch.autograd.grad``. Gradients of
local leaves accumulate in the context (never in ``.grad``); gradients of recv leaves go
back to the worker that sent those tensors, which runs a pass from its send record. A
worker answers a gradient message only once every pass it caused has finished, so when
``backward`` returns on the root, the whole distributed backward has finished. Summing
the passes is exact because backward is linear in the incoming gradient; the graphs are
kept (``retain_graph``) until the context is released, as one worker may receive
gradients for one message from several passes.

Release: leaving ``context()`` releases it here and on every worker it reached (each
forwards the release to the workers it reached); a dead worker's contexts are released
everywhere when its death is noticed.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future as ConcurrentFuture
from pickle import PickleBuffer
from typing import TYPE_CHECKING, Any

import torch

from ._agent import endpoint
from ._wire import DecodeSession, EncodeSession, decode, encode

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = ["Context", "Engine", "current_context", "engine", "running_in"]

MsgKey = tuple[int, int]

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
    """One distributed autograd context as this worker knows it."""

    __slots__ = ("grads", "id", "known", "lock", "recv_index", "recvs", "released", "sends")

    def __init__(self, context_id: int) -> None:
        self.id = context_id
        self.lock = threading.Lock()
        self.known: set[int] = set()
        self.sends: dict[MsgKey, list[torch.Tensor]] = {}
        self.recvs: dict[MsgKey, tuple[int, dict[int, torch.Tensor]]] = {}
        self.recv_index: dict[int, tuple[MsgKey, int, int]] = {}
        self.grads: dict[torch.Tensor, torch.Tensor] = {}
        self.released = False

    # torch's DistAutogradContext spelling, for programs that inspect contexts.

    def _context_id(self) -> int:
        return self.id

    def _known_worker_ids(self) -> set[int]:
        return set(self.known)


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
            ctx.recvs.clear()
            ctx.recv_index.clear()

    def _peer_gone(self, rank: int, reason: str, died: bool) -> None:
        if not died:
            return
        with self._lock:
            orphans = [cid for cid in self.contexts if cid >> 48 == rank]
        for context_id in orphans:
            self.release(context_id, origin=rank)

    # -- recording ------------------------------------------------------------------------

    def record_send(self, ctx: Context, dest: int, tensors: list[torch.Tensor]) -> MsgKey | None:
        """Remember tensors sent to ``dest``; returns the message key (None: nothing)."""
        ctx.known.add(dest)
        if not tensors:
            return None
        key = (self.state.me.id, next(self._keys))
        with ctx.lock:
            ctx.sends[key] = tensors
        return key

    def record_recv(
        self, ctx: Context, key: MsgKey, src: int, tensors: dict[int, torch.Tensor]
    ) -> None:
        """Remember the leaves rebuilt from message ``key`` of ``src``."""
        with ctx.lock:
            ctx.recvs[key] = (src, tensors)
            for index, tensor in tensors.items():
                ctx.recv_index[id(tensor)] = (key, index, src)

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
            pending = self.run_pass(ctx, list(roots), [torch.ones_like(r) for r in roots])
            for future in pending:
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

    def run_pass(
        self, ctx: Context, outputs: list[torch.Tensor], grad_outputs: list[torch.Tensor]
    ) -> list[ConcurrentFuture[None]]:
        """One local pass; returns the gradient messages it sent to other workers."""
        leaves = _leaves(outputs)
        if not leaves:
            return []
        try:
            grads = _vjp(outputs, leaves, grad_outputs)
        except Exception as error:
            # As torch: the error names the worker, and stays one line as it travels back.
            raise RuntimeError(f"Error on Node {self.state.me.id}: {error}") from None
        outgoing: dict[MsgKey, tuple[int, dict[int, torch.Tensor]]] = {}
        # A gradient buffer that several leaves got (or that is laid out unlike its
        # leaf) is copied before it is kept, as torch's AccumulateGrad does.
        shared = {id(g) for g in grads if g is not None and sum(h is g for h in grads) > 1}
        with ctx.lock:
            for leaf, grad in zip(leaves, grads):
                if grad is None:
                    continue
                where = ctx.recv_index.get(id(leaf))
                if where is not None:
                    key, index, src = where
                    outgoing.setdefault(key, (src, {}))[1][index] = grad
                    continue
                known = ctx.grads.get(leaf)
                if known is not None:
                    ctx.grads[leaf] = known + grad
                elif id(grad) in shared or not _fits(grad, leaf):
                    ctx.grads[leaf] = _copy_like(grad, leaf)
                else:
                    ctx.grads[leaf] = grad
        return [self._send_grads(ctx, src, key, g) for key, (src, g) in outgoing.items()]

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


def _fits(grad: torch.Tensor, leaf: torch.Tensor) -> bool:
    """The gradient can be kept as it is: a dense one laid out as its leaf."""
    if grad.layout != torch.strided:
        return True
    return grad.is_contiguous() and grad.stride() == leaf.stride()


def _copy_like(grad: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    if grad.layout != torch.strided:
        return grad.clone()
    if leaf.layout == torch.strided and leaf.is_contiguous():
        return grad.clone(memory_format=torch.contiguous_format)
    return torch.empty_strided(leaf.shape, leaf.stride(), dtype=grad.dtype).copy_(grad)


def _pass_error(error: BaseException) -> BaseException:
    """What a failed remote pass makes this one fail with: the node's own error, unwrapped
    (each hop would otherwise nest the whole remote traceback again)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, RuntimeError) and str(cause).startswith("Error on Node "):
        return RuntimeError(str(cause))
    return error


def _vjp(
    outputs: list[torch.Tensor], inputs: list[torch.Tensor], grad_outputs: list[torch.Tensor]
) -> Sequence[torch.Tensor | None]:
    """``torch.autograd.grad(..., retain_graph=True, allow_unused=True)``, lean.

    The public function's first call with explicit output gradients imports torch's
    symbolic-shape machinery (over a second of start-up per process) only to compare
    shapes; the engine is called directly here and the shapes compared plainly.
    """
    for output, grad in zip(outputs, grad_outputs):
        if output.shape != grad.shape:
            raise RuntimeError(
                f"a gradient of shape {tuple(grad.shape)} arrived for a tensor of shape "
                f"{tuple(output.shape)}"
            )
    run = getattr(torch.autograd.graph, "_engine_run_backward", None)
    if run is None:  # another torch version: the public way
        return torch.autograd.grad(
            outputs, inputs, grad_outputs, retain_graph=True, allow_unused=True
        )
    grads: Sequence[torch.Tensor | None] = run(
        tuple(outputs), tuple(grad_outputs), True, False, tuple(inputs), True, accumulate_grad=False
    )
    return grads


def _leaves(outputs: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The leaf tensors requiring grad that ``outputs`` depend on, each once."""
    leaves: list[torch.Tensor] = []
    seen_leaves: set[int] = set()
    seen: set[Any] = set()
    stack: list[Any] = []
    for tensor in outputs:
        if tensor.grad_fn is None:
            if tensor.requires_grad and id(tensor) not in seen_leaves:
                seen_leaves.add(id(tensor))
                leaves.append(tensor)
        else:
            stack.append(tensor.grad_fn)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) not in seen_leaves:
            seen_leaves.add(id(variable))
            leaves.append(variable)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                stack.append(child)
    return leaves


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
            with ctx.lock:
                sent = ctx.sends.get(key)
            if sent is None:
                raise RuntimeError(
                    f"worker {state.me.name!r} has no record of message {key} in autograd "
                    f"context {context_id}"
                )
            outputs = [sent[i] for i in sorted(grads)]
            pending = eng.run_pass(ctx, outputs, [grads[i] for i in sorted(grads)])
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
