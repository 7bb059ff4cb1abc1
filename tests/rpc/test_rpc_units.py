"""The pure parts of actormesh.rpc, in this process: options, names, rendezvous rules,
errors, the wire format's tensors."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch

import actormesh
from actormesh import rpc
from actormesh.rpc._options import UNSET_RPC_TIMEOUT, resolve_timeout
from actormesh.rpc._rendezvous import Member, _conflict, parse_init_method


def test_timeouts_resolve_like_torchs() -> None:
    assert resolve_timeout(UNSET_RPC_TIMEOUT, 60.0) == 60.0
    assert resolve_timeout(None, 60.0) == 60.0
    assert resolve_timeout(2.5, 60.0) == 2.5
    assert resolve_timeout(0, 60.0) is None  # 0 means no limit
    assert resolve_timeout(UNSET_RPC_TIMEOUT, 0.0) is None
    with pytest.raises(ValueError, match="timeout must be"):
        resolve_timeout(-3, 60.0)


def test_backend_options_keep_torchs_defaults() -> None:
    options = rpc.TensorPipeRpcBackendOptions()
    assert (options.num_worker_threads, options.rpc_timeout, options.init_method) == (
        16,
        60.0,
        "env://",
    )
    options.set_device_map("w1", {"cuda:0": "cuda:1"})
    assert options.device_maps == {"w1": {"cuda:0": "cuda:1"}}
    with pytest.raises(ValueError, match="num_worker_threads"):
        rpc.TensorPipeRpcBackendOptions(num_worker_threads=0)


def test_init_methods_name_the_rendezvous_address() -> None:
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert parse_init_method("env://", env) == ("10.0.0.1", 29500)
    assert parse_init_method("tcp://127.0.0.1:1234", {}) == ("127.0.0.1", 1234)
    with pytest.raises(ValueError, match="MASTER_PORT is not set"):
        parse_init_method("env://", {"MASTER_ADDR": "x"})
    with pytest.raises(ValueError, match="unsupported init_method"):
        parse_init_method("file:///tmp/store", {})
    with pytest.raises(ValueError, match="tcp://host:port"):
        parse_init_method("tcp://nohost", {})


def _member(name: str, rank: int, world_size: int = 3) -> Member:
    return Member(name, rank, world_size, "host", 100 + rank, f"/s/{rank}", f"agent{rank}")


def test_rendezvous_conflicts_name_both_sides() -> None:
    members = {0: _member("a", 0), 1: _member("b", 1)}
    assert _conflict(members, _member("c", 2), 3) == ""
    assert "rank 1 is used twice: by 'b' (pid 101) and by 'c'" in _conflict(
        members, _member("c", 1), 3
    )
    assert "worker name 'b' is not unique" in _conflict(members, _member("b", 2), 3)
    assert "world_size=4" in _conflict(members, _member("c", 2, world_size=4), 3)
    assert "outside 0..2" in _conflict(members, _member("c", 7), 3)


def test_worker_info_prints_and_compares_like_torchs() -> None:
    info = rpc.WorkerInfo("w1", 1)
    assert repr(info) == str(info) == "WorkerInfo(id=1, name=w1)"
    assert info == rpc.WorkerInfo("w1", 1) and hash(info) == hash(rpc.WorkerInfo("w1", 1))
    assert pickle.loads(pickle.dumps(info)) == info


@pytest.mark.parametrize(
    "error",
    [
        rpc.RpcTimeoutError("RPC ran for more than set timeout (300 ms)"),
        rpc.WorkerDiedError("worker w1 died", reason="killed by SIGKILL"),
        rpc.RpcNotInitialized("no init_rpc"),
        rpc.RendezvousError("rank 1 is used twice"),
    ],
)
def test_errors_are_runtime_errors_that_pickle(error: Exception) -> None:
    assert isinstance(error, RuntimeError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_errors_are_also_the_actormesh_errors_of_the_same_meaning() -> None:
    assert issubclass(rpc.RpcTimeoutError, actormesh.CallTimeoutError)
    assert issubclass(rpc.RpcTimeoutError, TimeoutError)
    assert issubclass(rpc.WorkerDiedError, actormesh.ActorDiedError)


def test_main_script_objects_missing_here_are_rebuilt_from_their_code() -> None:
    import cloudpickle

    from actormesh.rpc._wire import _main_object

    def triple(x: int) -> int:
        return 3 * x

    blob = cloudpickle.dumps(triple)
    rebuilt = _main_object("no_such_function_in_main", blob)
    assert rebuilt(4) == 12
    assert _main_object("no_such_function_in_main", blob) is rebuilt  # one identity
    with pytest.raises(AttributeError, match="not defined in this worker's main script"):
        _main_object("no_such_function_in_main", b"")


def _through_the_wire(obj: object) -> object:
    from actormesh.rpc._wire import DecodeSession, EncodeSession, decode, encode

    payload, buffers = encode(obj, EncodeSession(None, 1))
    return decode(payload, [bytearray(b.raw()) for b in buffers], DecodeSession(None, 0))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor([1 + 2j, 3 - 1j]).conj(),
        lambda: torch._neg_view(torch.arange(4.0)),
        lambda: torch.ones(4096).expand(100, 4096),  # 16 KiB storage, 1.6 MB of elements
        lambda: torch.nn.Parameter(torch.arange(6.0).reshape(2, 3)[:, 1:]),
        lambda: torch.arange(6.0).requires_grad_()[2:],
        lambda: torch.quantize_per_tensor(torch.arange(8.0), 0.5, 3, torch.quint8)[2:],
    ],
    ids=["conjugate", "negative", "expanded", "parameter-view", "grad-view", "quantized"],
)
def test_tensors_and_their_views_keep_values_type_strides_and_grad(make: Any) -> None:
    tensor = make()
    first, view = _through_the_wire([tensor, tensor[:1]])  # type: ignore[misc]
    assert type(first) is type(tensor) and first.requires_grad == tensor.requires_grad
    if tensor.is_quantized:  # torch's own pickling, quantizer included
        assert first.qscheme() == tensor.qscheme() and view.q_scale() == tensor.q_scale()
        assert torch.equal(first.dequantize(), tensor.dequantize())
        return
    assert torch.equal(first.detach(), tensor.detach().resolve_conj().resolve_neg())
    assert torch.equal(view.detach(), tensor[:1].detach().resolve_conj().resolve_neg())
    if not (tensor.is_conj() or tensor.is_neg()):
        assert first.stride() == tensor.stride()
        assert view.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()


def test_the_same_tensor_twice_in_a_message_arrives_as_one() -> None:
    tensor = torch.arange(3.0)
    a, b = _through_the_wire((tensor, tensor))  # type: ignore[misc]
    assert a is b


def test_a_failed_rpc_future_stops_wait_all_with_the_exception_itself() -> None:
    from actormesh.rpc import _future_errors

    assert _future_errors.compiled(), "scripts/bootstrap builds actormesh.rpc's helper"

    class Refused(KeyError):
        pass

    error = Refused("no")
    failed: torch.futures.Future[int] = torch.futures.Future()
    _future_errors.fail(failed, error)
    assert failed.done()
    for _ in range(2):  # each time the very object, as often as it is asked for
        with pytest.raises(Refused) as caught:
            failed.wait()
        assert caught.value is error
    never: torch.futures.Future[int] = torch.futures.Future()
    with pytest.raises(Refused):
        torch.futures.wait_all([never, failed])  # returns at once: never is never done
    chained = failed.then(lambda fut: fut.wait())
    with pytest.raises(RuntimeError, match="Refused"):
        chained.wait()  # torch's own rule for a callback that raises


def test_without_the_helper_a_failed_future_still_raises_its_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actormesh.rpc import _future_errors

    monkeypatch.setattr(_future_errors, "_compiled", None)
    failed: torch.futures.Future[int] = torch.futures.Future()
    _future_errors.fail(failed, ValueError("typed"))
    with pytest.raises(ValueError, match="typed"):
        failed.wait()
