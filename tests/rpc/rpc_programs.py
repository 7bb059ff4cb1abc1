"""Programs the RPC tests run in groups of processes, under either RPC implementation.

Every program takes ``(rank, world_size, backend, ...)`` where ``backend`` is ``"torch"``
(``torch.distributed.rpc`` and friends) or ``"actormesh"`` (``actormesh.rpc``), and is
written once against the API the two share: running the same program under both and
comparing what it returns is how the tests hold actormesh to torch's behaviour. Results
are plain data (numbers, lists, strings, bools) so they compare directly.

The functions the programs send over RPC are defined here, at module level, so torch's
pickler (which sends functions by name) can send them too.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib
import os
import signal
import sys
import threading
import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed.rpc
from torch import nn

from actormesh import rpc as actormesh_rpc


def load(backend: str) -> SimpleNamespace:
    """The RPC API of ``backend``: ``rpc``, ``dist_autograd``, ``DistributedOptimizer``,
    ``RemoteModule``."""
    if backend == "torch":
        import torch.distributed.autograd as dist_autograd
        import torch.distributed.rpc as rpc
        from torch.distributed.nn import RemoteModule
        from torch.distributed.optim import DistributedOptimizer
    elif backend == "actormesh":
        from actormesh import rpc
        from actormesh.rpc import DistributedOptimizer, RemoteModule
        from actormesh.rpc import autograd as dist_autograd
    else:
        raise ValueError(backend)
    return SimpleNamespace(
        rpc=rpc,
        dist_autograd=dist_autograd,
        DistributedOptimizer=DistributedOptimizer,
        RemoteModule=RemoteModule,
    )


_API: SimpleNamespace | None = None


def api() -> SimpleNamespace:
    """The API this worker process was started with."""
    assert _API is not None, "init() was not called in this process"
    return _API


def init(
    rank: int, world_size: int, backend: str, name: str | None = None, **options: Any
) -> SimpleNamespace:
    """Join the group as ``name`` (default ``w<rank>``) with the backend's options."""
    global _API
    ns = _API or load(backend)
    _API = ns
    torch.manual_seed(100 + rank)
    opts = ns.rpc.TensorPipeRpcBackendOptions(**options) if options else None
    ns.rpc.init_rpc(name or f"w{rank}", rank=rank, world_size=world_size, rpc_backend_options=opts)
    return ns


# -- functions sent over RPC -------------------------------------------------------------


def scale(x: torch.Tensor, factor: float = 1.0, *, bias: float = 0.0) -> torch.Tensor:
    return x * factor + bias


def fail_with(message: str) -> None:
    raise ValueError(message)


def a_lock() -> Any:
    return threading.Lock()


def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def whoami() -> str:
    return str(api().rpc.get_worker_info().name)


def pid() -> int:
    return os.getpid()


class Counter:
    def __init__(self, value: int) -> None:
        self.value = value

    def increment(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def get(self) -> int:
        return self.value

    @staticmethod
    @torch.distributed.rpc.functions.async_execution
    def static_async_add(to: str, x: torch.Tensor, y: torch.Tensor) -> Any:
        return api().rpc.rpc_async(to, torch.add, args=(x, y)).then(lambda fut: fut.wait() * 2)


def read_rref(rref: Any) -> int:
    """Used on a third worker: read a counter through an RRef it was given."""
    return int(rref.rpc_sync().get())


def fetch_rref(rref: Any) -> Any:
    return rref.to_here()


def make_local_rref(value: Any) -> Any:
    """An RRef owned by the worker this runs on, handed back to the caller."""
    return api().rpc.RRef(value)


def view_facts(*tensors: torch.Tensor) -> list[list[Any]]:
    """What a worker sees of tensors that were views of one storage at the sender: offset,
    strides, storage bytes, the first tensor sharing its storage, and its sum."""
    storages = [t.untyped_storage().data_ptr() for t in tensors]
    return [
        [
            t.storage_offset(),
            list(t.stride()),
            t.untyped_storage().nbytes(),
            storages.index(storage),
            float(t.sum()),
        ]
        for t, storage in zip(tensors, storages)
    ]


def views() -> list[torch.Tensor]:
    """A tensor and views of it; a large one and small views of it (copied by torch)."""
    base = torch.arange(12.0).reshape(3, 4)
    big = torch.arange(4096.0 * 4).reshape(4096, 4)  # 64 KiB
    return [
        *(base, base[1:], base.t(), base[:, 1]),
        *(big, big[:, 0], big[10:20].t(), big[:2000], big[1000:3500]),
    ]


def add_one_through_the_first(*tensors: torch.Tensor) -> list[float]:
    """Change the first tensor in place: views of its storage see the change."""
    tensors[0].add_(1)
    return [float(t.sum()) for t in tensors]


def nested_mul(to: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A -> B -> C: B multiplies on C, then squares locally."""
    product = api().rpc.rpc_sync(to, torch.mul, args=(a, b))
    return product * product


# Marked with actormesh's decorator; the static method below with torch's. Both libraries
# recognise both marks, and each program runs the two.
@actormesh_rpc.functions.async_execution
def async_add_chained(to: str, x: torch.Tensor, y: int, z: int) -> Any:
    return api().rpc.rpc_async(to, torch.add, args=(x, y)).then(lambda fut: fut.wait() + z)


def sum_of_squares(x: torch.Tensor) -> torch.Tensor:
    return (x * x).sum()


_PARKED: list[Any] = []


@actormesh_rpc.functions.async_execution
def parked(i: int) -> Any:
    """Reply only when ``release_parked`` runs: no thread may wait meanwhile."""
    gate: torch.futures.Future[int] = torch.futures.Future()
    _PARKED.append(gate)
    return gate.then(lambda fut: fut.wait() + i)


def count_parked() -> int:
    return len(_PARKED)


def release_parked() -> int:
    gates = list(_PARKED)
    _PARKED.clear()
    for gate in gates:
        gate.set_result(100)
    return len(gates)


def make_param(n: int) -> nn.Parameter:
    return nn.Parameter(torch.arange(float(n)))


def param_rref(rref: Any) -> Any:
    return api().rpc.RRef(rref.local_value())


def times_param(rref: Any, x: torch.Tensor) -> torch.Tensor:
    return rref.local_value() * x


def local_value_of(rref: Any) -> Any:
    return rref.local_value()


def gradients_on_owner(context_id: int, rref: Any) -> list[float]:
    grads = api().dist_autograd.get_gradients(context_id)
    return [float(v) for v in grads[rref.local_value()]]


# -- the contract: one program, every API point, plain results -------------------------


def contract(rank: int, world_size: int, backend: str) -> dict[str, Any]:
    """Exercise each point of the shared API from w0 (w1 and w2 serve)."""
    from actormesh.testing import wait_until

    ns = init(rank, world_size, backend)
    rpc = ns.rpc
    out: dict[str, Any] = {}
    if rank == 0:
        ones = torch.ones(2)
        w1 = rpc.get_worker_info("w1")
        out["worker_info"] = [w1.id, w1.name, rpc.get_worker_info().name]
        out["builtin"] = rpc.rpc_sync("w1", torch.add, args=(ones, 3)).tolist()
        out["builtin_bad_args"] = []
        for bad in [(torch.add, ()), (torch.ones, (2, 2))]:  # torch.ones(2, 2) is Python's
            try:
                rpc.rpc_sync("w1", bad[0], args=bad[1])
                out["builtin_bad_args"].append("no error")
            except RuntimeError as error:
                out["builtin_bad_args"].append("failed to match any schema" in str(error))
        out["builtin_shape"] = rpc.rpc_sync("w1", torch.ones, args=((2, 2),)).shape == (2, 2)
        out["by_rank"] = rpc.rpc_sync(1, whoami)
        out["by_info"] = rpc.rpc_sync(w1, whoami)
        out["to_self"] = rpc.rpc_sync("w0", whoami)
        out["kwargs"] = rpc.rpc_sync(
            "w2", scale, args=(ones,), kwargs={"factor": 3.0, "bias": 1.0}
        ).tolist()
        counter = rpc.rpc_sync("w1", Counter, args=(5,))
        out["class_built_remotely"] = [type(counter).__name__, counter.value]

        fut = rpc.rpc_async("w1", scale, args=(ones, 2.0))
        out["async_wait"] = fut.wait().tolist()
        chained = rpc.rpc_async("w2", scale, args=(ones, 2.0)).then(lambda f: f.wait() * 10)
        out["async_then"] = chained.wait().tolist()
        futs = [rpc.rpc_async(f"w{1 + i % 2}", scale, args=(ones, float(i))) for i in range(4)]
        out["wait_all"] = [t.tolist() for t in torch.futures.wait_all(futs)]
        collected = torch.futures.collect_all(
            [rpc.rpc_async("w1", scale, args=(ones, float(i))) for i in range(3)]
        ).wait()
        out["collect_all"] = [f.value().tolist() for f in collected]
        # wait_all stops at the first future that fails, while another still waits.
        slow = rpc.rpc_async("w1", parked, args=(7,))
        failing = rpc.rpc_async("w2", fail_with, args=("early",))
        try:
            torch.futures.wait_all([slow, failing])
            out["wait_all_early"] = "no error"
        except ValueError as error:
            out["wait_all_early"] = ["early" in str(error), slow.done()]
        rpc.rpc_sync("w1", release_parked)
        out["wait_all_early"].append(slow.wait())
        seen = threading.Event()
        fut = rpc.rpc_async("w2", whoami)
        fut.add_done_callback(lambda f: seen.set())
        out["done_callback"] = [fut.wait(), seen.wait(10)]

        try:
            rpc.rpc_sync("w1", fail_with, args=("bad input 7",))
            out["remote_exception"] = "no error"
        except ValueError as error:
            text = str(error)
            out["remote_exception"] = ["bad input 7" in text, "fail_with" in text]
        try:
            rpc.rpc_async("w2", fail_with, args=("async bad",)).wait()
            out["async_exception"] = "no error"
        except ValueError as error:
            out["async_exception"] = "async bad" in str(error)
        # A result that cannot be pickled back: torch raises RuntimeError, naming the type.
        out["unpicklable_result"] = []
        for fetch in (
            lambda: rpc.rpc_sync("w1", a_lock),
            lambda: rpc.rpc_async("w2", a_lock).wait(),
            lambda: rpc.remote("w1", a_lock).to_here(),
        ):
            try:
                fetch()
                out["unpicklable_result"].append("no error")
            except RuntimeError as error:
                out["unpicklable_result"].append("pickle" in str(error))

        started = time.monotonic()
        try:
            rpc.rpc_sync("w1", sleep_for, args=(4.0,), timeout=0.3)
            out["call_timeout"] = "no error"
        except RuntimeError as error:
            out["call_timeout"] = [
                "timeout" in str(error).lower(),
                time.monotonic() - started < 3,  # long before the function returned
                # torch's words, as programs match on them
                str(error).startswith("RPCErr:1:RPC ran for more than set timeout (300 ms)"),
            ]
        default = rpc.get_rpc_timeout()
        rpc._set_rpc_timeout(0.3)
        try:
            rpc.rpc_sync("w2", sleep_for, args=(2.0,))
            out["default_timeout"] = "no error"
        except RuntimeError as error:
            out["default_timeout"] = "timeout" in str(error).lower()
        finally:
            rpc._set_rpc_timeout(default)
        out["timeout_default_value"] = default

        rref = rpc.remote("w1", Counter, args=(3,))
        out["rref_to_here"] = rref.to_here().value
        out["rref_owner"] = [rref.owner().name, rref.owner_name(), rref.is_owner()]
        out["rref_proxies"] = [
            rref.rpc_sync().increment(2),
            rref.rpc_async().increment(1).wait(),
            rref.remote().get().to_here(),
        ]
        out["rref_third_worker"] = rpc.rpc_sync("w2", read_rref, args=(rref,))
        try:
            rref.local_value()
            out["local_value_on_user"] = "no error"
        except RuntimeError:
            out["local_value_on_user"] = "RuntimeError"
        local = rpc.RRef(torch.full((2,), 7.0))
        out["local_rref"] = [
            local.is_owner(),
            local.owner().name,
            local.to_here().tolist(),
            local.local_value().tolist(),
            rpc.rpc_sync("w2", fetch_rref, args=(local,)).tolist(),
        ]
        returned = rpc.rpc_sync("w2", make_local_rref, args=(torch.ones(3),))
        out["rref_from_owner"] = [returned.owner().name, returned.to_here().tolist()]
        failing = rpc.remote("w2", fail_with, args=("remote bad",))
        try:
            failing.to_here()
            out["remote_failure"] = "no error"
        except ValueError as error:
            out["remote_failure"] = "remote bad" in str(error)
        slow = rpc.remote("w2", sleep_for, args=(2.0,))
        try:
            slow.to_here(timeout=0.3)
            out["to_here_timeout"] = "no error"
        except RuntimeError as error:
            out["to_here_timeout"] = "timeout" in str(error).lower() or "timed out" in str(error)

        slow = rpc.rpc_async("w1", sleep_for, args=(4.0,))
        started = time.monotonic()
        rpc.rpc_sync("w1", whoami)
        # A slow call does not hold up the next one: calls run on a thread pool.
        out["concurrent_calls"] = [time.monotonic() - started < 3.0, slow.done()]
        slow.wait()

        # More parked async_execution calls than the pool has threads (16).
        parked_calls = [rpc.rpc_async("w1", parked, args=(i,)) for i in range(40)]
        wait_until(lambda: rpc.rpc_sync("w1", count_parked) == 40, 60, "40 parked calls")
        out["parked_released"] = rpc.rpc_sync("w1", release_parked)
        out["parked_results"] = torch.futures.wait_all(parked_calls)

        out["async_execution"] = rpc.rpc_sync(
            "w1", async_add_chained, args=("w2", ones, 1, 1)
        ).tolist()
        out["async_static_method"] = rpc.rpc_sync(
            "w1", Counter.static_async_add, args=("w2", ones, ones)
        ).tolist()

        out["views_sent"] = rpc.rpc_sync("w1", view_facts, args=tuple(views()))
        out["views_returned"] = view_facts(*rpc.rpc_sync("w2", views))
        zeros = torch.zeros(6)
        out["views_in_place"] = rpc.rpc_sync(
            "w1", add_one_through_the_first, args=(zeros[2:], zeros, zeros[:3])
        )

        out.update(_autograd_points(ns))
    rpc.shutdown()
    return out


def _autograd_points(ns: SimpleNamespace) -> dict[str, Any]:
    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    out: dict[str, Any] = {}
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        out["nested_forward"] = None
        y = rpc.rpc_sync("w1", nested_mul, args=("w2", a, b))
        out["nested_forward"] = y.tolist()
        dist_autograd.backward(context_id, [y.sum()])
        grads = dist_autograd.get_gradients(context_id)
        out["nested_grads"] = [grads[a].tolist(), grads[b].tolist()]
        out["grad_not_in_dot_grad"] = a.grad is None and b.grad is None

    x = torch.tensor([1.0, -2.0], requires_grad=True)
    with dist_autograd.context() as context_id:
        loss_rref = rpc.remote("w2", sum_of_squares, args=(x,))
        loss_rref.backward(context_id)
        out["rref_backward"] = dist_autograd.get_gradients(context_id)[x].tolist()

    param = rpc.remote("w1", make_param, args=(3,))
    x = torch.tensor([1.0, 1.0, 2.0], requires_grad=True)
    optimizer = ns.DistributedOptimizer(torch.optim.SGD, [param], lr=0.5)
    with dist_autograd.context() as context_id:
        loss = rpc.rpc_sync("w1", times_param, args=(param, x)).sum()
        dist_autograd.backward(context_id, [loss])
        out["owner_grads"] = rpc.rpc_sync("w1", gradients_on_owner, args=(context_id, param))
        out["local_grads"] = dist_autograd.get_gradients(context_id)[x].tolist()
        optimizer.step(context_id)
    out["param_after_step"] = rpc.rpc_sync("w1", local_value_of, args=(param,)).tolist()

    module = ns.RemoteModule("w2/cpu", nn.Linear, args=(3, 2))
    inputs = torch.tensor([[1.0, 2.0, 3.0]])
    out["remote_module_forward"] = module.forward(inputs).tolist()
    out["remote_module_async"] = module.forward_async(inputs).wait().tolist()
    params = module.remote_parameters()
    out["remote_module_params"] = len(params)
    module_optimizer = ns.DistributedOptimizer(torch.optim.SGD, params, lr=0.1)
    with dist_autograd.context() as context_id:
        loss = module.forward(inputs).sum()
        dist_autograd.backward(context_id, [loss])
        module_optimizer.step(context_id)
    out["remote_module_after_step"] = module.forward(inputs).tolist()
    return out


# -- the parameter-server RNN, trained side by side with a local copy ------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def rnn_example(ns: SimpleNamespace) -> Any:
    """The example's module, its RPC names pointed at ``ns`` (in this process only)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    example = importlib.import_module("rpc_parameter_server_rnn")
    example.rpc = ns.rpc
    example.dist_autograd = ns.dist_autograd
    example.DistributedOptimizer = ns.DistributedOptimizer
    return example


def module_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in module.state_dict().items()}


def reset_parameters(module: nn.Module, seed: int) -> None:
    """Deterministic weights (the remote modules are built concurrently, so the order in
    which they draw from the owner's random generator is not fixed)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)


def module_grads(module: nn.Module, context_id: int) -> list[torch.Tensor]:
    grads = api().dist_autograd.get_gradients(context_id)
    return [grads[param] for param in module.parameters()]


def ps_rnn(rank: int, world_size: int, backend: str, steps: int) -> dict[str, Any]:
    """Train the example's RNN over RPC and a local copy on the same data, step by step."""
    global _API
    _API = load(backend)
    # Before joining: the peer may call into the example as soon as the group exists.
    example = rnn_example(_API)
    ns = init(rank, world_size, backend, name="trainer" if rank == 1 else "ps")
    out: dict[str, Any] = {}
    if rank == 1:
        out = _train_side_by_side(ns, example, steps)
    ns.rpc.shutdown()
    return out


def _train_side_by_side(ns: SimpleNamespace, ex: Any, steps: int) -> dict[str, Any]:
    dist_autograd = ns.dist_autograd
    model = ex.RNNModel("ps", ex.NTOKEN, ex.NINP, ex.NHID, ex.NLAYERS, dropout=0.0)
    emb, dec = model.emb_table_rref, model.decoder_rref
    ex._remote_method(reset_parameters, emb, 1)
    reset_parameters(model.rnn, 2)
    ex._remote_method(reset_parameters, dec, 3)
    local_emb = ex.EmbeddingTable(ex.NTOKEN, ex.NINP, 0.0)
    local_emb.load_state_dict(ex._remote_method(module_state, emb))
    local_rnn = copy.deepcopy(model.rnn)
    local_dec = ex.Decoder(ex.NTOKEN, ex.NHID, 0.0)
    local_dec.load_state_dict(ex._remote_method(module_state, dec))
    local_params = [*local_emb.parameters(), *local_rnn.parameters(), *local_dec.parameters()]

    optimizer = ns.DistributedOptimizer(torch.optim.SGD, model.parameter_rrefs(), lr=0.5)
    local_optimizer = torch.optim.SGD(local_params, lr=0.5)
    criterion = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1)
    out: dict[str, list[float]] = {"loss": [], "local_loss": [], "grad_diff": [], "param_diff": []}
    for data, target in ex.get_batches(generator, steps):
        hidden = ex.init_hidden()
        with dist_autograd.context() as context_id:
            output, _ = model(data, hidden)
            loss = criterion(output.view(-1, ex.NTOKEN), target)
            dist_autograd.backward(context_id, [loss])
            local_grads = dist_autograd.get_gradients(context_id)
            grads = [
                *ex._remote_method(module_grads, emb, context_id),
                *[local_grads[param] for param in model.rnn.parameters()],
                *ex._remote_method(module_grads, dec, context_id),
            ]
            optimizer.step(context_id)

        local_optimizer.zero_grad()
        local_out, _ = local_rnn(local_emb(data), hidden)
        local_loss = criterion(local_dec(local_out).view(-1, ex.NTOKEN), target)
        local_loss.backward()
        expected = [param.grad for param in local_params]
        local_optimizer.step()

        params = [
            *ex._remote_method(module_state, emb).values(),
            *[param.detach() for param in model.rnn.parameters()],
            *ex._remote_method(module_state, dec).values(),
        ]
        out["loss"].append(loss.item())
        out["local_loss"].append(local_loss.item())
        out["grad_diff"].append(_max_diff(grads, expected))
        out["param_diff"].append(_max_diff(params, [p.detach() for p in local_params]))
        out["grads_untouched"] = [all(p.grad is None for p in model.rnn.parameters())]
    out["final_params"] = [p.flatten().tolist() for p in params]  # type: ignore[assignment]
    return out


def _max_diff(got: list[torch.Tensor], expected: list[Any]) -> float:
    assert len(got) == len(expected), (len(got), len(expected))
    return max(float((g - e).abs().max()) for g, e in zip(got, expected))


# -- RRef lifetimes across three workers (actormesh only) ---------------------------------

LIVE: weakref.WeakSet[Tracked] = weakref.WeakSet()
_KEPT: list[Any] = []


class Tracked:
    """A value whose live instances its process can count."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        LIVE.add(self)

    def get(self) -> str:
        return self.tag


def live_tags() -> list[str]:
    gc.collect()
    return sorted(value.tag for value in LIVE)


def keep(rref: Any) -> bool:
    _KEPT.append(rref)
    return True


def read_kept() -> list[str]:
    return [str(rref.rpc_sync().get()) for rref in _KEPT]


def drop_kept() -> bool:
    _KEPT.clear()
    gc.collect()
    return True


def make_tracked_rref(tag: str) -> Any:
    return api().rpc.RRef(Tracked(tag))


def is_owner_of(rref: Any) -> bool:
    return bool(rref.is_owner()) and isinstance(rref.local_value(), Tracked)


def debug_info() -> dict[str, int]:
    info: dict[str, int] = api().rpc._get_debug_info()
    return info


def lifetime(rank: int, world_size: int) -> dict[str, Any]:
    """w0 creates values owned by w1, hands them to w2, and drops its references."""
    from actormesh.testing import wait_until

    port = os.environ["MASTER_PORT"]
    ns = init(rank, world_size, "actormesh", init_method=f"tcp://127.0.0.1:{port}")
    rpc = ns.rpc
    out: dict[str, Any] = {}
    if rank == 0:

        def owner_holds(expected: list[str]) -> None:
            wait_until(lambda: rpc.rpc_sync("w1", live_tags) == expected, 30, f"{expected}")

        a = rpc.remote("w1", Tracked, args=("a",))
        # remote() returns before the owner has built the value (as torch's does).
        owner_holds(["a"])
        out["created"] = rpc.rpc_sync("w1", live_tags)
        rpc.rpc_sync("w2", keep, args=(a,))
        del a
        gc.collect()
        # w0 lets go of its fork only once w2's fork is registered with the owner.
        wait_until(lambda: debug_info()["num_user_rrefs"] == 0, 30, "w0 to release its fork")
        out["creator_dropped"] = rpc.rpc_sync("w1", live_tags)
        out["third_worker_reads"] = rpc.rpc_sync("w2", read_kept)
        rpc.rpc_sync("w2", drop_kept)
        owner_holds([])
        out["all_dropped"] = rpc.rpc_sync("w1", live_tags)

        # Forks handed on and dropped at once, many in flight together.
        refs = [rpc.remote("w1", Tracked, args=(f"m{i:02}",)) for i in range(20)]
        futures = [rpc.rpc_async("w2", keep, args=(ref,)) for ref in refs]
        del refs
        gc.collect()
        torch.futures.wait_all(futures)
        out["handed_on_reads"] = rpc.rpc_sync("w2", read_kept)
        rpc.rpc_sync("w2", drop_kept)
        owner_holds([])

        b = rpc.rpc_sync("w1", make_tracked_rref, args=("b",))
        out["returned_alive"] = rpc.rpc_sync("w1", live_tags)
        del b
        gc.collect()
        owner_holds([])
        out["returned_dropped"] = rpc.rpc_sync("w1", live_tags)

        c = rpc.remote("w1", Tracked, args=("c",))
        out["back_at_owner"] = rpc.rpc_sync("w1", is_owner_of, args=(c,))
        del c
        gc.collect()
        owner_holds([])
        out["owner_entries"] = rpc.rpc_sync("w1", debug_info)["num_owner_rrefs"]
        pending = rpc.rpc_async("w2", sleep_for, args=(0.5,))
    rpc.shutdown()
    if rank == 0:
        # A graceful shutdown waits for outstanding work.
        out["outstanding_done"] = [pending.done(), pending.wait()]
    return out


# -- workers that die (actormesh only) ------------------------------------------------------


def die_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_after(seconds: float) -> None:
    time.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)


class _DieInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        return grad


def doubles_then_dies_in_backward(x: torch.Tensor) -> torch.Tensor:
    return _DieInBackward.apply(x)


def open_context_toward(to: str) -> int:
    """Enter a context on this worker (never left) and send a tensor in it to ``to``."""
    context = api().dist_autograd.context()
    context_id: int = context.__enter__()
    api().rpc.rpc_sync(to, scale, args=(torch.ones(2, requires_grad=True),))
    return context_id


def death(rank: int, world_size: int) -> dict[str, Any]:
    """w0 watches w1, w2 and w3 die in the middle of what it asked them to do."""
    from actormesh.testing import wait_until

    ns = init(rank, world_size, "actormesh")
    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    if rank != 0:
        threading.Event().wait()  # serve until killed
    out: dict[str, Any] = {}

    def outcome(call: Any) -> list[Any]:
        started = time.monotonic()
        try:
            call()
        except Exception as error:
            return [
                type(error).__name__,
                isinstance(error, RuntimeError),
                str(error)[:300],
                round(time.monotonic() - started, 1),
            ]
        return ["no error"]

    out["rpc_sync"] = outcome(lambda: rpc.rpc_sync("w1", die_now))
    out["after_death"] = outcome(lambda: rpc.rpc_sync("w1", whoami))
    rref = rpc.remote("w2", die_after, args=(0.5,))
    out["to_here"] = outcome(lambda: rref.to_here(timeout=30))

    foreign = rpc.rpc_sync("w3", open_context_toward, args=("w0",))
    out["foreign_context"] = foreign >> 48
    out["contexts_before"] = debug_info()["num_autograd_contexts"]
    x = torch.ones(3, requires_grad=True)
    with dist_autograd.context() as context_id:
        y = rpc.rpc_sync("w3", doubles_then_dies_in_backward, args=(x,))
        out["backward"] = outcome(lambda: dist_autograd.backward(context_id, [y.sum()]))
    wait_until(lambda: debug_info()["num_autograd_contexts"] == 0, 30, "contexts to go")
    out["contexts_after"] = debug_info()["num_autograd_contexts"]
    out["shutdown"] = outcome(rpc.shutdown)
    return out


# -- joining the group (actormesh only) -----------------------------------------------------


def join_as(rank: int, world_size: int, names: list[str], ranks: list[int]) -> Any:
    """Try to join as ``names[rank]`` with rank ``ranks[rank]``; report what happened."""
    from actormesh import rpc

    options = rpc.TensorPipeRpcBackendOptions(rpc_timeout=20)
    try:
        rpc.init_rpc(
            names[rank], rank=ranks[rank], world_size=world_size, rpc_backend_options=options
        )
    except Exception as error:
        return [type(error).__name__, str(error)]
    rpc.shutdown()
    return "joined"


def join_a_bigger_group(rank: int, world_size: int, claimed: int) -> Any:
    """Join a group of ``claimed`` workers (more than are started); what happened."""
    from actormesh import rpc

    options = rpc.TensorPipeRpcBackendOptions(rpc_timeout=3)
    try:
        rpc.init_rpc(f"w{rank}", rank=rank, world_size=claimed, rpc_backend_options=options)
    except Exception as error:
        return [type(error).__name__, str(error)]
    rpc.shutdown()
    return "joined"


def _timed_shutdown(ns: SimpleNamespace) -> list[Any]:
    """A graceful shutdown: ``[error type, message, seconds]``, or ``["no error"]``."""
    started = time.monotonic()
    try:
        ns.rpc.shutdown()
    except Exception as error:
        return [type(error).__name__, str(error), round(time.monotonic() - started, 1)]
    return ["no error"]


def _exit_now() -> None:
    os._exit(5)


def one_dies_before_shutdown(rank: int, world_size: int) -> Any:
    """w1 dies inside an RPC of w0's; w0 and w2 then shut down gracefully."""
    ns = init(rank, world_size, "actormesh")
    if rank == 1:
        threading.Event().wait()  # until w0's RPC ends it
    if rank == 0:
        with contextlib.suppress(RuntimeError):
            ns.rpc.rpc_sync("w1", _exit_now)
    return _timed_shutdown(ns)


def leader_leaves_early(rank: int, world_size: int) -> Any:
    """w0 shuts down without waiting (and lives on); the others shut down gracefully."""
    ns = init(rank, world_size, "actormesh")
    if rank == 0:
        ns.rpc.shutdown(graceful=False)
        threading.Event().wait()  # stays alive until the test ends it
    return _timed_shutdown(ns)


# -- DistributedDataParallel inside distributed autograd (pytorch/examples' ddp_rpc) ---------


def seeded_embedding_bag(seed: int) -> nn.EmbeddingBag:
    # A generator of its own: both trainers build their tables on the server at once, on
    # two threads, and seeding the global generator would let their draws interleave.
    weight = torch.randn(10, 4, generator=torch.Generator().manual_seed(seed))
    return nn.EmbeddingBag(10, 4, mode="sum", _weight=weight)


def bag_forward(rref: Any, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return rref.local_value()(indices, offsets)


def bag_param_rrefs(rref: Any) -> list[Any]:
    return [api().rpc.RRef(p) for p in rref.local_value().parameters()]


def bag_weight(rref: Any) -> list[float]:
    return list(rref.local_value().weight.detach().flatten().tolist())


def bag_grad(rref: Any, context_id: int) -> list[float]:
    """The gradient of the table's weight in ``context_id`` (flattened; to_dense: it is
    sparse when the bag is)."""
    grad = api().dist_autograd.get_gradients(context_id)[rref.local_value().weight]
    return list(grad.to_dense().flatten().tolist())


def ddp_rpc(rank: int, world_size: int, backend: str, steps: int, pg_file: str) -> dict[str, Any]:
    """Two trainers (ranks 0, 1) whose dense layer is one DDP module over gloo, each with an
    embedding table on the parameter server (rank 2), trained with distributed autograd
    and ``DistributedOptimizer``: the pattern of pytorch/examples' ``ddp_rpc``."""
    ns = init(rank, world_size, backend, name="ps" if rank == 2 else f"trainer{rank}")
    out: dict[str, Any] = {}
    if rank < 2:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=rank, world_size=2)
        try:
            out = _ddp_trainer(ns, rank, steps)
        finally:
            dist.destroy_process_group()
    ns.rpc.shutdown()
    return out


def _ddp_trainer(ns: SimpleNamespace, rank: int, steps: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rpc, dist_autograd = ns.rpc, ns.dist_autograd
    table = rpc.remote("ps", seeded_embedding_bag, args=(10 + rank,))
    torch.manual_seed(20 + rank)  # different per rank: DDP must broadcast rank 0's
    dense = nn.Linear(4, 3)
    model = DistributedDataParallel(dense)
    optimizer = ns.DistributedOptimizer(
        torch.optim.SGD,
        [*rpc.rpc_sync("ps", bag_param_rrefs, args=(table,)), *map(rpc.RRef, dense.parameters())],
        lr=0.1,
    )
    generator = torch.Generator().manual_seed(30 + rank)
    out: dict[str, Any] = {"loss": [], "dense_grad": [], "table": [], "average_error": []}
    untouched = True
    for _ in range(steps):
        indices = torch.randint(0, 10, (8,), generator=generator)
        offsets = torch.tensor([0, 2, 4, 6])
        target = torch.randn(4, 3, generator=generator)
        with dist_autograd.context() as context_id:
            embedded = rpc.rpc_sync("ps", bag_forward, args=(table, indices, offsets))
            loss = nn.functional.mse_loss(model(embedded), target)
            dist_autograd.backward(context_id, [loss])
            grads = dist_autograd.get_gradients(context_id)
            dense_grad = torch.cat([grads[p].flatten() for p in dense.parameters()])
            untouched = untouched and all(p.grad is None for p in dense.parameters())
            # What DDP must have made of it: the mean of both trainers' own gradients.
            own = torch.autograd.grad(
                nn.functional.mse_loss(dense(embedded.detach()), target), list(dense.parameters())
            )
            mean = torch.cat([g.flatten() for g in own])
            dist.all_reduce(mean)
            mean /= 2
            out["average_error"].append(float((dense_grad - mean).abs().max()))
            out["dense_grad"].append(dense_grad.tolist())
            out["table"].append(rpc.rpc_sync("ps", bag_grad, args=(table, context_id)))
            optimizer.step(context_id)
        out["loss"].append(loss.item())
    out["dense"] = torch.cat([p.detach().flatten() for p in dense.parameters()]).tolist()
    out["table_after"] = rpc.rpc_sync("ps", bag_weight, args=(table,))
    out["grads_untouched"] = untouched
    return out
