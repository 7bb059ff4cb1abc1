"""torch's own RPC test suites, instantiated against actormesh.rpc (or, for the control
run, against torch.distributed.rpc with TensorPipe).

The suites ship in the torch wheel (``torch/testing/_internal/distributed/rpc/`` and
``.../distributed/nn/api/remote_module_test.py``). Like torch's own
``test/distributed/rpc/test_tensorpipe_agent.py``, this module mixes each generic suite
with an agent fixture and a ``MultiProcessTestCase`` that spawns the ranks, so every test
runs in ``world_size`` fresh processes. What differs is the agent:

- ``ACTORMESH_TORCH_SUITE_BACKEND=actormesh`` (the default): every rank installs
  ``torch_suite_alias`` before it imports a suite, so ``torch.distributed.rpc``,
  ``torch.distributed.autograd``, ``DistributedOptimizer`` and ``RemoteModule`` are
  actormesh's in the test code, the fixtures and ``dist_utils`` alike;
- ``ACTORMESH_TORCH_SUITE_BACKEND=torch``: torch itself, with torch's own TensorPipe
  fixture from the wheel (the control run).

Ranks of both backends keep the process groups they create until their test method has
returned (``torch_suite_groups``: a deadlock of torch's own in DDP's teardown otherwise).

The controlling pytest process never installs the alias: it only spawns ranks and waits.
A rank knows it is one by ``RANK_ENV``, set while the controller starts the ranks. Tests
that are inherently about something actormesh does not have (TorchScript, CUDA and device
maps, TensorPipe's own options, the faulty agent, torch's profiler and internals) are
skipped, with their reason, from the one table ``SKIPS`` below; both backends skip them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import unittest
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND_ENV = "ACTORMESH_TORCH_SUITE_BACKEND"
BACKENDS = ("actormesh", "torch")
# Set (to the backend) in the environment the ranks inherit; never in the controller.
RANK_ENV = "_ACTORMESH_TORCH_SUITE_RANK"
# Seconds torch's own controller waits for a test's ranks before it collects their stacks
# and kills them; pytest's own timeout for a test (conftest.py) is longer, so a hung test
# reports what its ranks were doing.
RANK_TIMEOUT_S = 100


# How the ranks start: "forkserver" (the default) or "spawn" (as torch does).
START_METHOD = os.environ.get("ACTORMESH_TORCH_SUITE_START", "forkserver")


def backend() -> str:
    """The backend of this run (``ACTORMESH_TORCH_SUITE_BACKEND``)."""
    chosen = os.environ.get(BACKEND_ENV, "actormesh")
    if chosen not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV} must be one of {BACKENDS}, not {chosen!r}")
    return chosen


# Read by torch's common_distributed at import.
os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", str(RANK_TIMEOUT_S))

if os.environ.get(RANK_ENV) == "actormesh":
    import torch_suite_alias

    torch_suite_alias.install()

import torch_suite_groups  # noqa: E402

if os.environ.get(RANK_ENV):
    # Both backends: ranks keep the process groups they make until their test method has
    # returned, past a deadlock of torch's in DDP's teardown (see torch_suite_groups).
    torch_suite_groups.install()

import torch.distributed.rpc as rpc  # noqa: E402 (after the alias, on purpose)
from torch.testing._internal.common_distributed import MultiProcessTestCase  # noqa: E402
from torch.testing._internal.distributed import ddp_under_dist_autograd_test  # noqa: E402
from torch.testing._internal.distributed.nn.api import remote_module_test  # noqa: E402
from torch.testing._internal.distributed.rpc import (  # noqa: E402
    dist_autograd_test,
    dist_optimizer_test,
    rpc_test,
)
from torch.testing._internal.distributed.rpc.rpc_agent_test_fixture import (  # noqa: E402
    RpcAgentTestFixture,
)
from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (  # noqa: E402
    TensorPipeRpcAgentTestFixture,
)

# -- what runs --------------------------------------------------------------------------

# The suites of the selection, by the name their classes get here.
SUITES: dict[str, type] = {
    "RpcTest": rpc_test.RpcTest,
    "TensorPipeAgentRpcTest": rpc_test.TensorPipeAgentRpcTest,
    "DistAutogradTest": dist_autograd_test.DistAutogradTest,
    "TensorPipeAgentDistAutogradTest": dist_autograd_test.TensorPipeAgentDistAutogradTest,
    "DistOptimizerTest": dist_optimizer_test.DistOptimizerTest,
    "RemoteModuleTest": remote_module_test.RemoteModuleTest,
    "ThreeWorkersRemoteModuleTest": remote_module_test.ThreeWorkersRemoteModuleTest,
    # DistributedDataParallel inside distributed autograd (torch's
    # test/distributed/rpc/test_tensorpipe_agent.py runs these two as well).
    "DdpUnderDistAutogradTest": ddp_under_dist_autograd_test.DdpUnderDistAutogradTest,
    "DdpComparisonTest": ddp_under_dist_autograd_test.DdpComparisonTest,
}

# Why a test is skipped on both backends. A key is "Suite.test_name", or "*.test_name"
# for every suite that has the test; the values are the reasons (REASONS).
TORCHSCRIPT = "TorchScript over RPC (torch.jit functions and modules) is not supported"
CUDA = "CUDA tensors, devices and device maps (CPU only)"
TENSORPIPE = "TensorPipe's own options, transports and channels"
PROFILER = "torch's RPC profiler (remote events, record_function over RPC)"
INTERNALS = "inspects torch's C++ internals (agent objects, autograd graph nodes, pickler)"
DYNAMIC = "dynamic groups (init_rpc without a world_size)"

SKIPS: dict[str, str] = {
    # TorchScript
    "RpcTest.test_stress_heavy_rpc_torchscript": TORCHSCRIPT,
    "RpcTest.test_wait_all_exit_early_script_function": TORCHSCRIPT,
    "RpcTest.test_rref_get_future": TORCHSCRIPT,  # its last case is a script function
    "RpcTest.test_async_record_function_cbs_jit_call": TORCHSCRIPT,
    "DistAutogradTest.test_backward_simple_script_call": TORCHSCRIPT,
    "DistAutogradTest.test_trainer_ps_torchscript_functions": TORCHSCRIPT,
    "TensorPipeAgentDistAutogradTest.test_backward_simple_script_call_sparse": TORCHSCRIPT,
    # These iterate over both kinds of RemoteModule: a plain one and one scripted
    # through a TorchScript interface (_RemoteModule(_module_interface_cls=...)).
    "RemoteModuleTest.test_forward_async": TORCHSCRIPT,
    "RemoteModuleTest.test_forward_sync": TORCHSCRIPT,
    "RemoteModuleTest.test_forward_async_script": TORCHSCRIPT,
    "RemoteModuleTest.test_forward_sync_script": TORCHSCRIPT,
    "RemoteModuleTest.test_remote_module_py_pickle_not_supported_script": TORCHSCRIPT,
    "ThreeWorkersRemoteModuleTest.test_send_remote_module_over_the_wire_script_not_supported": (
        TORCHSCRIPT
    ),
    # torch's RPC profiler
    "RpcTest.test_build_rpc_profiling_key": PROFILER,
    "RpcTest.test_profiler_export_trace": PROFILER,
    "RpcTest.test_profiler_remote_events_profiled": PROFILER,
    "RpcTest.test_profiler_remote_events_profiled_single_threaded": PROFILER,
    "RpcTest.test_profiler_rpc_key_names": PROFILER,
    "RpcTest.test_profiler_rpc_memory": PROFILER,
    "RpcTest.test_profiler_rpc_record_shapes": PROFILER,
    "RpcTest.test_profiler_with_async_rpc_builtin": PROFILER,
    "RpcTest.test_profiler_with_async_rpc_builtin_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_async_rpc_udf": PROFILER,
    "RpcTest.test_profiler_with_async_rpc_udf_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_autograd_context": PROFILER,
    "RpcTest.test_profiler_with_autograd_context_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_remote_builtin": PROFILER,
    "RpcTest.test_profiler_with_remote_builtin_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_remote_udf": PROFILER,
    "RpcTest.test_profiler_with_remote_udf_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_script_async_rpc": PROFILER,
    "RpcTest.test_profiler_with_script_async_rpc_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_script_remote_rpc": PROFILER,
    "RpcTest.test_profiler_with_script_remote_rpc_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_script_sync_rpc": PROFILER,
    "RpcTest.test_profiler_with_script_sync_rpc_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_sync_rpc_builtin": PROFILER,
    "RpcTest.test_profiler_with_sync_rpc_builtin_single_threaded": PROFILER,
    "RpcTest.test_profiler_with_sync_rpc_udf": PROFILER,
    "RpcTest.test_profiler_with_sync_rpc_udf_single_threaded": PROFILER,
    "RpcTest.test_rpc_profiling_async_function": PROFILER,
    "RpcTest.test_rpc_profiling_async_function_single_threaded": PROFILER,
    "RpcTest.test_rpc_profiling_remote_record_function": PROFILER,
    "RpcTest.test_server_process_global_profiler": PROFILER,
    "RpcTest.test_rref_type_blocking": PROFILER,  # counts RPCs through profiler events
    "RpcTest.test_rref_type_non_blocking": PROFILER,
    "DistAutogradTest.test_dist_autograd_profiling": PROFILER,
    # TensorPipe itself
    "RpcTest.test_disable_gil_profiling": TENSORPIPE,  # the agent's GIL-wait counters
    "TensorPipeAgentRpcTest.test_infer_backend_from_options": TENSORPIPE,  # TensorPipeAgent
    # torch's internals
    "RpcTest.test_register_rpc_backend_and_set_and_start_rpc_backend": INTERNALS,
    "RpcTest.test_duplicate_name": INTERNALS,  # rpc._init_rpc_backend with a store
    "RpcTest.test_use_rpc_pickler": INTERNALS,
    "RpcTest.test_py_nested_pickle": INTERNALS,  # pickles with torch's _internal_rpc_pickler
    "RpcTest.test_rref_leak": INTERNALS,  # mocks shutdown's RRef-leak check
    "RpcTest.test_ignore_rref_leak": INTERNALS,
    "RpcTest.test_shutdown_errors": INTERNALS,  # monkeypatches shutdown's helpers
    "RpcTest.test_wait_all_workers_timeout": INTERNALS,  # monkeypatches shutdown's barrier
    "DistAutogradTest.test_clean_context_during_backward": INTERNALS,  # _send_functions()
    # dynamic groups
    "TensorPipeAgentRpcTest.test_dynamic_and_static_init_rpc_together": DYNAMIC,
    "TensorPipeAgentRpcTest.test_dynamic_rpc_existing_rank_can_communicate_with_new_rank": (
        DYNAMIC
    ),
    "TensorPipeAgentRpcTest.test_dynamic_rpc_existing_rank_can_communicate_with_new_rank_cuda": (
        DYNAMIC
    ),
    "TensorPipeAgentRpcTest.test_dynamic_rpc_init_rpc": DYNAMIC,
    "TensorPipeAgentRpcTest.test_dynamic_rpc_init_rpc_without_rank": DYNAMIC,
    "TensorPipeAgentRpcTest.test_dynamic_rpc_new_rank_can_communicated_with_existing_rank": (
        DYNAMIC
    ),
}
# The autograd-graph tests check torch's SendRpcBackward/RecvRpcBackward nodes: actormesh
# records messages beside the graph instead of adding nodes to it.
for _suite, _sparse in (("DistAutogradTest", ""), ("TensorPipeAgentDistAutogradTest", "_sparse")):
    for _test in (
        "graph_for_builtin_call",
        "graph_for_builtin_remote_call",
        "graph_for_py_nested_call",
        "graph_for_py_nested_call_itself",
        "graph_for_py_nested_remote_call",
        "graph_for_py_nested_remote_call_itself",
        "graph_for_python_call",
        "graph_for_python_remote_call",
        "no_graph_with_tensors_not_require_grad",
        "no_graph_with_tensors_not_require_grad_remote",
        "rpc_complex_args",
        "remote_complex_args",
    ):
        SKIPS[f"{_suite}.test_{_test}{_sparse}"] = INTERNALS


# Tests that torch passes here and actormesh does not, each with the reason it is left
# (same keys as SKIPS). These still run; report.py files their failures under the reason.
DIFFERENCES: dict[str, str] = {
    "DistAutogradTest.test_backward_unused_send_function": (
        "deliberately better: torch's backward hangs forever when an RPC's result is "
        "unused (the test checks that it hangs); actormesh's completes"
    ),
    "RpcTest.test_use_rref_after_shutdown": (
        "its second half calls torch's internal pickler (rpc.internal.serialize); the "
        "first half, to_here() after shutdown, raises torch's error"
    ),
}


def skip_reason(suite: str, test: str) -> str | None:
    """Why ``suite.test`` is skipped, or ``None`` when it runs."""
    return SKIPS.get(f"{suite}.{test}") or SKIPS.get(f"*.{test}")


# -- the fixtures -----------------------------------------------------------------------


class ActormeshAgentTestFixture(RpcAgentTestFixture):
    """The agent fixture for actormesh.rpc (the suites reach it as ``rpc``)."""

    @property
    def rpc_backend(self) -> Any:
        return rpc.backend_registry.BackendType["TENSORPIPE"]

    @property
    def rpc_backend_options(self) -> Any:
        return rpc.TensorPipeRpcBackendOptions(init_method=self.init_method)

    def get_shutdown_error_regex(self) -> str:
        return ".*"

    def get_timeout_error_regex(self) -> str:
        return "RPC ran for more than"


FIXTURES: dict[str, type] = {
    "actormesh": ActormeshAgentTestFixture,
    "torch": TensorPipeRpcAgentTestFixture,
}


class SpawnRanks(MultiProcessTestCase):
    """Starts the test's ranks before it runs, and makes sure none outlives it.

    torch spawns each rank as a fresh interpreter, which imports torch and the suites
    again: about ten seconds a test on two cores. Here ranks are forked from a fork
    server that imported them once (this module, alias included): each still starts from
    the same freshly imported state, with no RPC state and no threads.
    """

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()

    def _spawn_processes(self) -> None:
        context = multiprocessing.get_context(START_METHOD)
        if START_METHOD == "forkserver":
            context.set_forkserver_preload([__name__])
        # The fork server, started with the first rank, keeps this environment for good;
        # it finds this module through PYTHONPATH (Python 3.11's ignores the sys.path
        # it is handed, and a failed preload is silent).
        saved = {k: os.environ.get(k) for k in (RANK_ENV, "PYTHONPATH")}
        os.environ[RANK_ENV] = backend()
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, saved["PYTHONPATH"]]))
        try:
            self._start_processes(context.Process)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def run_test(self, test_name: str, parent_pipe: Any) -> None:
        # In a rank: the test method, then the process groups it made are let go of from
        # Python (torch_suite_groups), with the GIL released while gloo's workers finish.
        try:
            super().run_test(test_name, parent_pipe)
        finally:
            torch_suite_groups.release()

    def tearDown(self) -> None:
        processes = list(self.processes)
        super().tearDown()  # terminates whatever still runs
        for process in processes:
            process.join(5)
            if process.exitcode is None:
                os.kill(process.pid, signal.SIGKILL)
                process.join(5)
        if os.path.exists(self.file_name):
            os.unlink(self.file_name)


def _suite_class(name: str, suite: type) -> type:
    namespace: dict[str, Any] = {"__module__": __name__, "__qualname__": name}
    for attr in dir(suite):
        if attr.startswith("test_"):
            reason = skip_reason(name, attr)
            if reason is not None:
                namespace[attr] = unittest.skip(reason)(getattr(suite, attr))
    return type(name, (suite, FIXTURES[backend()], SpawnRanks), namespace)


CLASSES: dict[str, type] = {name: _suite_class(name, suite) for name, suite in SUITES.items()}
globals().update(CLASSES)
