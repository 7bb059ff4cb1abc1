"""One program per API point, run under torch.distributed.rpc and under actormesh.rpc.

Each program runs once per backend in a fresh group of processes (module-scoped, cached);
every test checks the expected behaviour on both backends, so a wrong expectation shows
up on torch first, and ``test_both_backends_observe_the_same`` compares everything the
programs observed.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import pytest
import rpc_programs
from rpc_support import run_group

# Groups of processes start slowly on a loaded machine (each imports torch).
pytestmark = pytest.mark.timeout(300)

BACKENDS = ["torch", "actormesh"]
PS_RNN_STEPS = 4
DDP_STEPS = 3

_cache: dict[tuple[str, str], Any] = {}


def observed(program: str, backend: str) -> dict[str, Any]:
    """What ``program`` returned on its driver rank under ``backend`` (run once; a failed
    run fails every test that needs it without running again)."""
    key = (program, backend)
    if key not in _cache:
        try:
            if program == "contract":
                _cache[key] = run_group(rpc_programs.contract, 3, backend, timeout=250)[0]
            elif program == "ddp_rpc":
                with tempfile.TemporaryDirectory() as folder:
                    pg_file = os.path.join(folder, "pg")
                    results = run_group(
                        rpc_programs.ddp_rpc, 3, backend, DDP_STEPS, pg_file, timeout=250
                    )
                _cache[key] = {"trainer0": results[0], "trainer1": results[1]}
            else:
                _cache[key] = run_group(rpc_programs.ps_rnn, 2, backend, PS_RNN_STEPS, timeout=250)[
                    1
                ]
        except Exception as error:
            _cache[key] = error
    found = _cache[key]
    if isinstance(found, Exception):
        raise found
    result: dict[str, Any] = found
    return result


@pytest.fixture(params=BACKENDS)
def contract(request: pytest.FixtureRequest) -> dict[str, Any]:
    return observed("contract", request.param)


@pytest.fixture(params=BACKENDS)
def ps_rnn(request: pytest.FixtureRequest) -> dict[str, Any]:
    return observed("ps_rnn", request.param)


@pytest.fixture(params=BACKENDS)
def ddp_rpc(request: pytest.FixtureRequest) -> dict[str, Any]:
    return observed("ddp_rpc", request.param)


# -- 1. the group ----------------------------------------------------------------------


def test_worker_info_names_and_ids_come_from_init_rpc(contract: dict[str, Any]) -> None:
    assert contract["worker_info"] == [1, "w1", "w0"]


def test_destinations_may_be_a_name_a_rank_a_worker_info_or_self(
    contract: dict[str, Any],
) -> None:
    assert contract["by_rank"] == "w1"
    assert contract["by_info"] == "w1"
    assert contract["to_self"] == "w0"


# -- 2. rpc_sync, rpc_async, remote ---------------------------------------------------


def test_rpc_sync_runs_builtins_functions_with_kwargs_and_classes(
    contract: dict[str, Any],
) -> None:
    assert contract["builtin"] == [4.0, 4.0]
    # Builtins run as torch's operators: their schemas, not Python's bindings, decide.
    assert contract["builtin_bad_args"] == [True, True]
    assert contract["builtin_shape"] is True
    assert contract["kwargs"] == [4.0, 4.0]
    assert contract["class_built_remotely"] == ["Counter", 5]


def test_rpc_async_futures_support_wait_then_wait_all_collect_all_and_callbacks(
    contract: dict[str, Any],
) -> None:
    assert contract["async_wait"] == [2.0, 2.0]
    assert contract["async_then"] == [20.0, 20.0]
    assert contract["wait_all"] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    assert contract["collect_all"] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    # The failure, typed, while the other call was still waiting; that one still answers.
    assert contract["wait_all_early"] == [True, False, 107]
    assert contract["done_callback"] == ["w2", True]


def test_remote_exceptions_keep_their_type_message_and_remote_traceback(
    contract: dict[str, Any],
) -> None:
    # [message present, the remote function named in the traceback]
    assert contract["remote_exception"] == [True, True]
    assert contract["async_exception"] is True
    assert contract["unpicklable_result"] == [True, True, True]
    assert contract["remote_failure"] is True


def test_per_call_and_default_timeouts_raise_runtime_errors_quickly(
    contract: dict[str, Any],
) -> None:
    assert contract["call_timeout"] == [True, True, True]
    assert contract["default_timeout"] is True
    assert contract["timeout_default_value"] == 60.0
    assert contract["to_here_timeout"] is True


# -- 3. RRef --------------------------------------------------------------------------


def test_rref_fetches_names_its_owner_and_proxies_method_calls(contract: dict[str, Any]) -> None:
    assert contract["rref_to_here"] == 3
    assert contract["rref_owner"] == ["w1", "w1", False]
    assert contract["rref_proxies"] == [5, 6, 6]
    assert contract["local_value_on_user"] == "RuntimeError"


def test_rrefs_travel_to_third_workers_and_back_from_their_owner(
    contract: dict[str, Any],
) -> None:
    assert contract["rref_third_worker"] == 6
    assert contract["local_rref"] == [True, "w0", [7.0, 7.0], [7.0, 7.0], [7.0, 7.0]]
    assert contract["rref_from_owner"] == ["w2", [1.0, 1.0, 1.0]]


# -- 4. async_execution -----------------------------------------------------------------


def test_async_execution_functions_reply_when_their_future_completes(
    contract: dict[str, Any],
) -> None:
    assert contract["async_execution"] == [3.0, 3.0]
    assert contract["async_static_method"] == [4.0, 4.0]


def test_parked_async_execution_calls_hold_no_thread(contract: dict[str, Any]) -> None:
    assert contract["parked_released"] == 40
    assert contract["parked_results"] == [100 + i for i in range(40)]


def test_a_slow_call_does_not_hold_up_the_next_one(contract: dict[str, Any]) -> None:
    assert contract["concurrent_calls"] == [True, False]


def test_views_of_one_storage_arrive_sharing_one_and_small_views_are_copied(
    contract: dict[str, Any],
) -> None:
    # [offset, strides, storage bytes, first tensor on its storage, sum], as torch has them
    base = [
        [0, [4, 1], 48, 0, 66.0],  # base: its whole storage, 12 floats
        [4, [4, 1], 48, 0, 60.0],  # base[1:]
        [0, [1, 4], 48, 0, 66.0],  # base.t()
        [1, [4], 48, 0, 15.0],  # base[:, 1]
    ]
    big = [  # 64 KiB; a view using under half of it is sent as a copy of its own
        [0, [4, 1], 65536, 4, 134209536.0],  # big
        [0, [1], 16384, 5, 33546240.0],  # big[:, 0]
        [0, [1, 4], 160, 6, 2380.0],  # big[10:20].t(): copied, still transposed
        [0, [4, 1], 32000, 7, 31996000.0],  # big[:2000]: 32,000 bytes
        [4000, [4, 1], 65536, 4, 89995000.0],  # big[1000:3500]: on big's storage
    ]
    for seen in (contract["views_sent"], contract["views_returned"]):
        assert seen == base + big
    assert contract["views_in_place"] == [4.0, 4.0, 1.0]


# -- 5. distributed autograd and the optimizer ----------------------------------------------


def test_gradients_flow_back_through_nested_rpcs_into_the_context(
    contract: dict[str, Any],
) -> None:
    # y = (a * b)^2 computed as A -> B (square) -> C (multiply).
    assert contract["nested_forward"] == [0.25, 4.0, 36.0]
    assert contract["nested_grads"] == [[0.5, 4.0, 24.0], [1.0, -8.0, 36.0]]
    assert contract["grad_not_in_dot_grad"] is True
    # RRef.backward(context_id) starts the pass on the owner of a remote() value.
    assert contract["rref_backward"] == [2.0, -4.0]


def test_distributed_optimizer_steps_parameters_on_their_owner(contract: dict[str, Any]) -> None:
    assert contract["owner_grads"] == [1.0, 1.0, 2.0]
    assert contract["local_grads"] == [0.0, 1.0, 2.0]
    assert contract["param_after_step"] == [-0.5, 0.5, 1.0]


# -- 6. RemoteModule ----------------------------------------------------------------------


def test_remote_module_runs_forward_remotely_and_trains_its_parameters(
    contract: dict[str, Any],
) -> None:
    assert contract["remote_module_forward"] == contract["remote_module_async"]
    assert contract["remote_module_params"] == 2
    before, after = contract["remote_module_forward"], contract["remote_module_after_step"]
    # One SGD step (lr 0.1) on sum(W x + b) lowers each output by 0.1 * (|x|^2 + 1) = 1.5.
    for old, new in zip(before[0], after[0]):
        assert math.isclose(new, old - 1.5, abs_tol=1e-5)


# -- the parameter-server RNN ---------------------------------------------------------------


def test_parameter_server_rnn_matches_a_local_copy_at_every_step(ps_rnn: dict[str, Any]) -> None:
    assert len(ps_rnn["loss"]) == PS_RNN_STEPS
    for step in range(PS_RNN_STEPS):
        assert ps_rnn["grad_diff"][step] <= 1e-6, f"step {step}"
        assert ps_rnn["param_diff"][step] <= 1e-6, f"step {step}"
        assert math.isclose(ps_rnn["loss"][step], ps_rnn["local_loss"][step], abs_tol=1e-6)
    assert ps_rnn["grads_untouched"] == [True]


# -- DistributedDataParallel inside distributed autograd (ddp_rpc) --------------------------


def test_ddp_under_distributed_autograd_averages_gradients_in_the_context(
    ddp_rpc: dict[str, Any],
) -> None:
    for trainer in ("trainer0", "trainer1"):
        seen = ddp_rpc[trainer]
        assert len(seen["loss"]) == DDP_STEPS
        # The dense layer's gradient in each trainer's context is the mean over trainers.
        assert max(seen["average_error"]) <= 1e-6, seen["average_error"]
        assert seen["grads_untouched"], "distributed autograd wrote .grad"
    first, second = ddp_rpc["trainer0"], ddp_rpc["trainer1"]
    assert first["dense_grad"] == second["dense_grad"]
    assert first["dense"] == second["dense"]  # DDP keeps the replicas equal
    assert first["table_after"] != second["table_after"]  # each trainer's own table


# -- torch and actormesh side by side --------------------------------------------------------


@pytest.mark.parametrize("program", ["contract", "ps_rnn", "ddp_rpc"])
def test_both_backends_observe_the_same(program: str) -> None:
    mismatches = _differences(observed(program, "torch"), observed(program, "actormesh"))
    assert not mismatches, "\n".join(mismatches)


def _differences(expected: Any, got: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(got, dict):
        if expected.keys() != got.keys():
            return [f"{path}: keys {sorted(expected)} != {sorted(got)}"]
        return [d for k in expected for d in _differences(expected[k], got[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{path}: {len(expected)} items != {len(got)}"]
        return [
            d
            for i, (e, g) in enumerate(zip(expected, got))
            for d in _differences(e, g, f"{path}[{i}]")
        ]
    if isinstance(expected, float) and isinstance(got, float):
        if path.startswith((".grad_diff", ".param_diff")) or ".average_error" in path:
            return []  # both are checked against 1e-6 above; their exact value may differ
        return (
            []
            if math.isclose(expected, got, rel_tol=1e-5, abs_tol=1e-6)
            else [f"{path}: {expected} != {got}"]
        )
    return [] if expected == got else [f"{path}: torch {expected!r} != actormesh {got!r}"]
