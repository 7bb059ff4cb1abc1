"""Selection, timeouts and the record of torch's RPC suites (see ``torch_suite_harness``).

The default run takes the fast subset ``FAST``; ``ACTORMESH_TORCH_SUITE=full`` runs the
whole selection. With ``ACTORMESH_TORCH_SUITE_RECORD=path`` each test's outcome is
written to that JSON file as it finishes (``report.py`` reads it).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

FULL_ENV = "ACTORMESH_TORCH_SUITE"
RECORD_ENV = "ACTORMESH_TORCH_SUITE_RECORD"
HERE = Path(__file__).resolve().parent
# pytest's limit for one test: above torch's own (RANK_TIMEOUT_S), which collects the
# ranks' stacks first.
TEST_TIMEOUT_S = 150

# The fast subset of the default run, "Suite.test_name": every area of the API (joining
# and leaving, calls, RRefs and their lifetimes, async_execution, timeouts and errors,
# distributed autograd, DistributedOptimizer, RemoteModule, DDP inside distributed
# autograd), each test a second or two.
FAST: list[str] = [
    "RpcTest.test_worker_id",
    "RpcTest.test_get_worker_infos",
    "RpcTest.test_self_add",
    "RpcTest.test_send_to_rank",
    "RpcTest.test_invalid_names",
    "RpcTest.test_reinit",
    "RpcTest.test_duplicate_name_2",
    "RpcTest.test_world_size_one",
    "RpcTest.test_add",
    "RpcTest.test_nonzero",
    "RpcTest.test_multi_rpc",
    "RpcTest.test_future_wait_twice",
    "RpcTest.test_all_gather",
    "RpcTest.test_rpc_barrier_all",
    "RpcTest.test_rpc_barrier_partial_subset",
    "RpcTest.test_graceful_shutdown_with_uneven_workload",
    "RpcTest.test_shutdown_followed_by_rpc",
    "RpcTest.test_py_class_constructor",
    "RpcTest.test_py_class_method",
    "RpcTest.test_py_tensors_in_container",
    "RpcTest.test_py_raise_in_user_func",
    "RpcTest.test_py_function_exception",
    "RpcTest.test_nested_rpc",
    "RpcTest.test_stress_light_rpc",
    "RpcTest.test_builtin_remote_ret",
    "RpcTest.test_py_rref_args_user_share",
    "RpcTest.test_nested_rref",
    "RpcTest.test_rref_forward_chain",
    "RpcTest.test_local_value_not_on_owner",
    "RpcTest.test_rref_str",
    "RpcTest.test_rref_proxy_class",
    "RpcTest.test_rref_proxy_non_exist",
    "RpcTest.test_rref_context_debug_info",
    "RpcTest.test_pass_local_rrefs",
    "RpcTest.test_user_rrefs_confirmed",
    "RpcTest.test_remote_with_exception",
    "RpcTest.test_rref_timeout",
    "RpcTest.test_default_timeout_used",
    "RpcTest.test_wait_all",
    "RpcTest.test_callback_with_ret",
    "RpcTest.test_callback_wrong_arg_type",
    "RpcTest.test_async_function_nested",
    "RpcTest.test_async_class_rref_proxy",
    "RpcTest.test_return_future",
    "RpcTest.test_non_cont_tensors",
    "RpcTest.test_custom_exception_throw_during_reconstruction",
    "RpcTest.test_function_not_on_callee",
    "RpcTest.test_owner_rref_backward",
    "RpcTest.test_user_rref_backward",
    "RpcTest.test_init_rpc_twice",
    "RpcTest.test_init_pg_then_rpc",
    "RpcTest.test_my_parameter_server",
    "RpcTest.test_local_shutdown",
    "RpcTest.test_handle_send_exceptions",
    "RpcTest.test_wrong_types",
    "RpcTest.test_cannot_infer_backend_from_options",
    "RpcTest.test_wait_all_workers_dense",
    "TensorPipeAgentRpcTest.test_mismatched_type_for_options",
    "TensorPipeAgentRpcTest.test_set_and_get_num_worker_threads",
    "TensorPipeAgentRpcTest.test_rref_get_type_timeout_blocking",
    "TensorPipeAgentRpcTest.test_py_sparse_tensors_in_container",
    "DistAutogradTest.test_autograd_context",
    "DistAutogradTest.test_nested_context",
    "DistAutogradTest.test_backward_simple",
    "DistAutogradTest.test_backward_multiple_round_trips",
    "DistAutogradTest.test_backward_rref_nested",
    "DistAutogradTest.test_backward_invalid_args",
    "DistAutogradTest.test_backward_autograd_engine_error",
    # test_backward_python_udf_error is left to the full run: it failed once under load
    # (a UDF's backward error on a nested self-RPC not raised; docs/rpc.md).
    "DistAutogradTest.test_context_cleanup_tensor_with_grad",
    "DistAutogradTest.test_context_cleanup_nested_rpc",
    "DistAutogradTest.test_error_in_context",
    "DistAutogradTest.test_debug_info",
    "DistAutogradTest.test_no_grad_copy",
    "DistAutogradTest.test_trainer_ps",
    "DistAutogradTest.test_worker_ids_recorded",
    "DistAutogradTest.test_backward_node_failure",
    "TensorPipeAgentDistAutogradTest.test_backward_simple_sparse",
    "DistAutogradTest.test_post_hooks",
    "DdpComparisonTest.test_ddp_comparison",
    "DdpComparisonTest.test_ddp_dist_autograd_sparse_grads",
    "DdpComparisonTest.test_ddp_dist_autograd_local_vs_remote",
    "DdpUnderDistAutogradTest.test_backward_ddp_inside",
    "DistOptimizerTest.test_dist_optim",
    "DistOptimizerTest.test_dist_optim_exception",
    "DistOptimizerTest.test_dist_optim_exception_on_constructor",
    "DistOptimizerTest.test_dist_optim_none_grads",
    "RemoteModuleTest.test_bad_module",
    "RemoteModuleTest.test_forward_with_kwargs",
    "RemoteModuleTest.test_remote_parameters",
    "RemoteModuleTest.test_get_module_rref",
    "RemoteModuleTest.test_train_eval",
    "RemoteModuleTest.test_unsupported_methods",
    "RemoteModuleTest.test_remote_module_py_pickle_not_supported",
    "ThreeWorkersRemoteModuleTest.test_send_remote_module_over_the_wire",
    "ThreeWorkersRemoteModuleTest.test_create_remote_module_from_module_rref",
]

_records: dict[str, dict[str, Any]] = {}


def test_id(item: pytest.Item) -> str:
    """``Suite.test_name`` of a collected test."""
    return f"{item.parent.name}.{item.name}" if item.parent is not None else item.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = os.environ.get(FULL_ENV) == "full"
    keep, drop = [], []
    for item in items:
        if HERE not in item.path.parents:
            keep.append(item)
            continue
        item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))
        if full or test_id(item) in FAST:
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_ERROR = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Timeout|Exit|Failure)\b")


# A rank that fails takes the others with it (torch's controller stops them): errors
# that only say a peer went away are consequences, reported when nothing else is.
_CONSEQUENCE = re.compile(r"died|unreachable|is gone|connection|Connection|closed by peer|GLHF")


def failure_line(text: str) -> str:
    """The error a failed test ended with, in one line: a failed rank's own error (as
    torch's controller reports it), else the last line pytest reported."""
    lines = [
        line[1:].strip() if line.startswith("E ") else line.strip() for line in text.splitlines()
    ]
    errors = []
    for index, line in enumerate(lines):
        if " exited with error code " not in line:
            continue
        block = []
        for later in lines[index + 1 :]:
            if later.startswith("To execute this test") or " exited with error code " in later:
                break
            block.append(later)
        found = [b for b in block if _ERROR.match(b)]
        if found:
            errors.append(found[-1])
    primary = [e for e in errors if not _CONSEQUENCE.search(e)]
    if primary or errors:
        return (primary or errors)[0][:300]
    found = [line for line in lines if line.startswith(("E ", "RuntimeError", "Failed"))]
    return (found[-1] if found else (lines[-1] if lines else "?"))[:300]


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    target = os.environ.get(RECORD_ENV)
    if not target or HERE not in Path(report.fspath).resolve().parents:
        return
    name = ".".join(report.nodeid.split("::")[1:])
    record = _records.setdefault(name, {"outcome": "passed", "duration": 0.0})
    record["duration"] += report.duration
    if report.skipped:
        record["outcome"] = "skipped"
        longrepr = report.longrepr
        record["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    elif report.failed:
        record["outcome"] = "failed"
        text = str(report.longrepr)
        record["error"] = failure_line(text)
        record["timeout"] = "Timeout" in text or "timed out after" in text
    Path(target).write_text(json.dumps(_records, indent=1, sort_keys=True))
