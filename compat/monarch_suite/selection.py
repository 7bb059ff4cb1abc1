"""Which of Monarch's test files run, and which of their tests use Monarch internals.

``FILES`` lists the public-API test files (run on both sides); ``EXCLUDED`` every other
test file of Monarch 0.7.0 with the one-line reason it is left out. Inside a selected
file, ``internal_uses`` decides per test, from its source alone, whether it reaches a
Monarch name that the import mapping does not cover (``monarch._src``,
``monarch._rust_bindings``, ``monarch.config``, ``monarch._src.job``...): such a test is not
run and not counted, and the report lists it with the names it uses.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# -- the files -------------------------------------------------------------------------

FILES: tuple[str, ...] = (
    "test_accumulator_characterization.py",
    "test_actor_driver_characterization.py",
    "test_actor_error.py",
    "test_actor_logging.py",
    "test_client_context_guard.py",
    "test_client_shutdown.py",
    "test_concurrent_endpoints.py",
    "test_controller_dedup.py",
    "test_cookbook.py",
    "test_failure_introspection.py",
    "test_future_characterization.py",
    "test_gil_stranding.py",
    "test_host_mesh.py",
    "test_inter_mesh_ping_pong.py",
    "test_job.py",
    "test_port_forward.py",
    "test_port_reconstruction.py",
    "test_proc_mesh.py",
    "test_python_actors.py",
    "test_rdma.py",
    "test_rdma_action.py",
    "test_rdma_cpu_no_torch.py",
    "test_rdma_readiness_and_operations.py",
    "test_rdma_unit.py",
    "test_receive_ownership_characterization.py",
    "test_returns_future.py",
    "test_shell.py",
    "test_shutdown_without_client.py",
    "test_spmd.py",
    "test_supervision_hierarchy.py",
    "test_sync_actor_driver.py",
    "test_worker_fork_contract.py",
    "test_worker_loop_characterization.py",
)

_TENSOR_ENGINE = "Monarch's tensor engine (out of actormesh's scope)"
_TELEMETRY = "Monarch's telemetry pipeline (actormesh records none)"
EXCLUDED: dict[str, str] = {
    "test_actor_loop_finalization.py": "CPython finalization of Monarch's actor-loop thread "
    "(a model program on monarch._rust_bindings)",
    "test_actor_shape.py": "internal Shape/Slice/ShapeExt classes (monarch._src, Rust)",
    "test_admin_spawn_characterization.py": "Monarch's mesh-admin agent (Rust bindings)",
    "test_builtins_log.py": _TENSOR_ENGINE,
    "test_builtins_random.py": _TENSOR_ENGINE,
    "test_chain_broadcast.py": "a Rust extension's chain broadcast",
    "test_cli_integration.py": "the `monarch` CLI and monarch._src.job",
    "test_coalescing.py": _TENSOR_ENGINE,
    "test_config.py": "monarch.config (Monarch's runtime settings)",
    "test_controller.py": _TENSOR_ENGINE,
    "test_cuda.py": "needs CUDA devices",
    "test_debugger.py": "Monarch's debug controller internals (debug_controller is "
    "NotImplementedError on actormesh)",
    "test_deferred_pickle_characterization.py": "Monarch's deferred pickling (Rust bindings)",
    "test_device_mesh.py": _TENSOR_ENGINE,
    "test_distributed_telemetry.py": _TELEMETRY,
    "test_extension_linking.py": "links of Monarch's Rust extension",
    "test_future.py": _TENSOR_ENGINE + " (monarch.common.future)",
    "test_gather_mount.py": "monarch.gather_mount (FUSE)",
    "test_gil_on_control_plane.py": "GIL use of Monarch's Rust runtime threads",
    "test_grad_generator.py": _TENSOR_ENGINE,
    "test_logging_initialization_characterization.py": "Monarch's LoggingManager (monarch._src)",
    "test_mesh_trait.py": "internal MeshTrait/NDSlice classes (monarch._src)",
    "test_mock_cuda.py": "monarch.common.mock_cuda",
    "test_rdma_bench_driver.py": "the multi-host RDMA benchmark's modules",
    "test_rdma_bench_e2e.py": "the multi-host RDMA benchmark (ibverbs)",
    "test_rdma_bench_peer.py": "the multi-host RDMA benchmark's modules",
    "test_rdma_bench_stats.py": "the multi-host RDMA benchmark's modules",
    "test_rdma_bench_topology.py": "the multi-host RDMA benchmark's modules",
    "test_rdma_characterize.py": "ibverbs only (skips without an ibverbs device)",
    "test_rdma_local_memory_cache.py": "monarch._src.rdma's local memory cache",
    "test_remote_functions.py": _TENSOR_ENGINE,
    "test_remotemount.py": "monarch.remotemount (FUSE)",
    "test_rust_bindings_load.py": "loading Monarch's Rust bindings",
    "test_rust_struct_mixins.py": "Rust struct mixins (Rust bindings)",
    "test_rust_struct_value_mesh.py": "the Rust ValueMesh binding",
    "test_signal_safe_block_on.py": "a Rust test binary (oss_skip in Monarch's CI)",
    "test_spmd_host_mesh.py": "monarch.job.spmd's StoreJob and monarch._src.spmd",
    "test_telemetry_attributes.py": _TELEMETRY,
    "test_telemetry_config.py": _TELEMETRY,
    "test_telemetry_query_client.py": _TELEMETRY,
    "test_tensor_engine.py": _TENSOR_ENGINE,
    "test_value_mesh_compression_scheme.py": "a pure-Python model of a Rust compression "
    "scheme (uses no Monarch API)",
}
EXCLUDED_FOLDERS: dict[str, str] = {
    "_monarch": "internal modules (monarch._src, Rust bindings)",
    "_src": "internal modules (monarch._src.job, tools)",
    "code_sync": "monarch's code sync (monarch.tools)",
    "simulator": _TENSOR_ENGINE + " (simulator)",
    "tools": "the `monarch` CLI and monarch.tools",
}

# -- what the import mapping covers ----------------------------------------------------

# Public modules and their actormesh counterparts (the whole import mapping).
MAPPED_MODULES: dict[str, str] = {
    "monarch": "actormesh",
    "monarch.actor": "actormesh.actor",
    "monarch.rdma": "actormesh.rdma",
    "monarch.spmd": "actormesh.spmd",
    "monarch.proc_mesh": "actormesh.proc_mesh",
    "monarch.actor_mesh": "actormesh.actor_mesh",
    "monarch.job": "actormesh.job",
    "monarch.job.kubernetes": "actormesh.job.kubernetes",
}

# Names imported from an internal module that *are* the public object of the same name in
# Monarch 0.7.0 (``monarch._src.actor.host_mesh.this_host is monarch.actor.this_host``,
# checked with torchmonarch 0.7.0): they map to actormesh's public name. BootstrapCommand
# is not in monarch.actor, but it is the class of what its default_bootstrap_cmd() returns,
# and actormesh.actor has it. SupervisionError, what Monarch raises when a call reaches a
# mesh whose actors failed, is actormesh.SupervisionError, the base of the ActorDiedError
# and MeshStoppedError that actormesh raises there.
# A value with a dot names a public module's object instead of monarch.actor's
# ("job.JobTrait": monarch.job.JobTrait, actormesh.job.JobTrait). monarch._src.job.job's
# JobState is the one exception to "is": Monarch 0.7 has two classes of that name, and
# this one (not monarch.job's) is what job.state() returns there; actormesh has one.
ALIASES: dict[tuple[str, str], str] = {
    ("monarch._src.job.job", "JobState"): "job.JobState",
    ("monarch._src.job.job", "JobTrait"): "job.JobTrait",
    ("monarch._src.job.job", "LocalJob"): "job.LocalJob",
    ("monarch._src.job.job", "MeshAdminConfig"): "job.MeshAdminConfig",
    ("monarch._src.job.job", "TelemetryConfig"): "job.TelemetryConfig",
    ("monarch._src.job.job", "exec_command"): "job.exec_command",
    ("monarch._src.job.job", "job_load"): "job.job_load",
    ("monarch._src.job.job", "job_loads"): "job.job_loads",
    ("monarch._src.job.process", "ProcessJob"): "job.ProcessJob",
    ("monarch._src.job.service_identity", "deserialize_service_proc_ids"): (
        "job.deserialize_service_proc_ids"
    ),
    ("monarch._src.job.service_identity", "serialize_service_proc_ids"): (
        "job.serialize_service_proc_ids"
    ),
    ("monarch._rust_bindings.monarch_hyperactor.channel", "ChannelTransport"): "ChannelTransport",
    ("monarch._rust_bindings.monarch_hyperactor.host_mesh", "BootstrapCommand"): "BootstrapCommand",
    ("monarch._rust_bindings.monarch_hyperactor.proc", "ProcId"): "ProcId",
    ("monarch._rust_bindings.monarch_hyperactor.proc", "Uid"): "Uid",
    ("monarch._rust_bindings.monarch_hyperactor.supervision", "MeshFailure"): "MeshFailure",
    ("monarch._rust_bindings.monarch_hyperactor.supervision", "SupervisionError"): (
        "SupervisionError"
    ),
    ("monarch._src.actor.actor_mesh", "Actor"): "Actor",
    ("monarch._src.actor.actor_mesh", "ActorError"): "ActorError",
    ("monarch._src.actor.actor_mesh", "Channel"): "Channel",
    ("monarch._src.actor.actor_mesh", "Port"): "Port",
    ("monarch._src.actor.actor_mesh", "PortReceiver"): "PortReceiver",
    ("monarch._src.actor.actor_mesh", "ValueMesh"): "ValueMesh",
    ("monarch._src.actor.actor_mesh", "attach"): "attach",
    ("monarch._src.actor.actor_mesh", "context"): "context",
    ("monarch._src.actor.actor_mesh", "current_rank"): "current_rank",
    ("monarch._src.actor.actor_mesh", "shutdown_context"): "shutdown_context",
    ("monarch._src.actor.bootstrap", "attach_to_workers"): "attach_to_workers",
    ("monarch._src.actor.concurrent", "concurrent_endpoint"): "concurrent_endpoint",
    ("monarch._src.actor.endpoint", "endpoint"): "endpoint",
    ("monarch._src.actor.future", "Future"): "Future",
    ("monarch._src.actor.host_mesh", "HostMesh"): "HostMesh",
    ("monarch._src.actor.host_mesh", "default_bootstrap_cmd"): "default_bootstrap_cmd",
    ("monarch._src.actor.host_mesh", "this_host"): "this_host",
    ("monarch._src.actor.host_mesh", "this_proc"): "this_proc",
    ("monarch._src.actor.proc_mesh", "ProcMesh"): "ProcMesh",
    ("monarch._src.actor.proc_mesh", "get_or_spawn_controller"): "get_or_spawn_controller",
    ("monarch._src.actor.returns_future", "returns_future"): "returns_future",
}

# Monarch 0.7.0's other top-level modules: importable on the actormesh side, but every
# name in them is a stand-in that raises MonarchInternalUsed when used.
UNMAPPED_SUBMODULES: frozenset[str] = frozenset(
    [
        "_rust_bindings",
        "_src",
        "_testing",
        "bootstrap_main",
        "builtins",
        "cached_remote_function",
        "common",
        "config",
        "controller",
        "distributed_telemetry",
        "experimental",
        "fetch",
        "gather_mount",
        "gradient",
        "gradient_generator",
        "memory",
        "mesh_controller",
        "monarch_dashboard",
        "notebook",
        "opaque_module",
        "opaque_object",
        "parallel",
        "profiler",
        "python_local_mesh",
        "random",
        "remote_class",
        "remotemount",
        "rust_backend_mesh",
        "safe_torch",
        "simulator",
        "tensor_engine",
        "tensorboard",
        "timer",
        "tools",
        "worker",
        "world_mesh",
    ]
)

# Monarch's own test helpers. None: harness plumbing, replaced on the actormesh side by a
# stand-in of the same behaviour (see shim/); a string: using it is using that internal.
HELPERS: dict[str, str | None] = {
    "isolate_in_subprocess": None,
    "proc_mesh_test_utils": None,
    "rdma_test_utils": None,
    "scoped_state": "scoped_state (monarch._src.job.job)",
}


def public_name(alias: str) -> str:
    """The public Monarch name an ``ALIASES`` value stands for."""
    return f"monarch.{alias}" if "." in alias else f"monarch.actor.{alias}"


def unmapped(module: str) -> str | None:
    """The unmapped Monarch module ``module`` reaches (as reported), or None."""
    parts = module.split(".")
    if parts[0] != "monarch" or module in MAPPED_MODULES:
        return None
    if parts[1] in UNMAPPED_SUBMODULES:
        return ".".join(parts[:2])
    if ".".join(parts[:2]) in MAPPED_MODULES:
        return module  # a submodule of a public module (monarch.actor.x): not mapped
    return None  # not a module of Monarch 0.7.0: importing it fails as it does there


# -- per-test analysis -----------------------------------------------------------------


@dataclass
class _Def:
    refs: set[str]  # module-level names it reads
    uses: set[str]  # unmapped Monarch modules it reaches directly
    node: ast.AST | None = None
    private: set[tuple[str, str]] = field(default_factory=set)  # (root name, _attr)


def _root(node: ast.AST) -> str | None:
    """The name an expression like ``a.b().c[0]`` starts from."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        if isinstance(node, ast.Call):
            is_cast = ast.unparse(node.func) in ("cast", "typing.cast") and len(node.args) > 1
            node = node.args[1] if is_cast else node.func
        else:
            node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_fixture(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any("fixture" in ast.unparse(d) for d in decorators)


def _is_autouse(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any("fixture" in ast.unparse(d) and "autouse=True" in ast.unparse(d) for d in decorators)


def _walk_skipping_annotations(node: ast.AST) -> Iterable[ast.AST]:
    """Every node under ``node`` except annotations and the type of ``cast(T, x)``:
    naming a type for the type checker is no use."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if (
            isinstance(current, ast.Call)
            and ast.unparse(current.func) in ("cast", "typing.cast")
            and current.args
        ):
            stack.append(current.func)
            stack.extend(current.args[1:])
            stack.extend(current.keywords)
            continue
        for name, value in ast.iter_fields(current):
            if name in ("annotation", "returns"):
                continue
            children = value if isinstance(value, list) else [value]
            stack.extend(c for c in children if isinstance(c, ast.AST))


_CODE_IMPORT = re.compile(r"(?:from|import)\s+(monarch(?:\.\w+)+)")


def _scan(node: ast.AST) -> _Def:
    """What ``node`` reads: module-level names, and unmapped modules it reaches itself."""
    refs: set[str] = set()
    uses: set[str] = set()
    private: set[tuple[str, str]] = set()
    for sub in _walk_skipping_annotations(node):
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
            root = _root(sub.value)
            if root and not sub.attr.startswith("__"):
                private.add((root, sub.attr))
        if isinstance(sub, ast.Name):
            refs.add(sub.id)
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            where = unmapped(sub.module)
            if where and any((sub.module, a.name) not in ALIASES for a in sub.names):
                uses.add(where)
            if HELPERS.get(sub.module):
                uses.add(str(HELPERS[sub.module]))
        elif isinstance(sub, ast.Import):
            for alias in sub.names:
                where = unmapped(alias.name)
                if where:
                    uses.add(where)
        elif isinstance(sub, ast.Attribute):
            chain = ast.unparse(sub)
            if chain.startswith("monarch."):
                where = unmapped(".".join(chain.split(".")[:2]))
                if where:
                    uses.add(where)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            # importlib.import_module("monarch._rust_bindings...") and the like
            # or the source of a child program: "from monarch._rust_bindings... import"
            text = sub.value
            names = [text] if text.startswith("monarch.") and " " not in text else []
            names += _CODE_IMPORT.findall(text)
            for module in names:
                where = unmapped(".".join(module.split(".")[:2]))
                if where:
                    uses.add(where)
    return _Def(refs, uses, node, private)


def _module_bindings(
    tree: ast.Module,
) -> tuple[dict[str, _Def], dict[str, set[str]], dict[str, str]]:
    """Module-level definitions, the names bound by imports of unmapped modules, and the
    names bound to Monarch's public objects (what they are)."""
    defs: dict[str, _Def] = {}
    imported: dict[str, set[str]] = {}
    public: dict[str, str] = {}

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defs[stmt.name] = _scan(stmt)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = stmt.value
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and value is not None:
                            defs[name.id] = _scan(value)
            elif isinstance(stmt, ast.ImportFrom) and stmt.module:
                where = unmapped(stmt.module)
                helper = HELPERS.get(stmt.module)
                for alias in stmt.names:
                    bound = alias.asname or alias.name
                    if where and (stmt.module, alias.name) not in ALIASES:
                        imported[bound] = {f"{stmt.module}.{alias.name}"}
                    elif helper:
                        imported[bound] = {helper}
                    elif (stmt.module, alias.name) in ALIASES:
                        public[bound] = public_name(ALIASES[stmt.module, alias.name])
                    elif stmt.module in MAPPED_MODULES:
                        public[bound] = f"{stmt.module}.{alias.name}"
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    where = unmapped(alias.name)
                    if where and alias.asname:
                        imported[alias.asname] = {alias.name}
                    elif alias.name in MAPPED_MODULES:
                        public[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(stmt, ast.If | ast.Try | ast.With):
                visit(stmt.body)
                visit(getattr(stmt, "orelse", []))
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)
                visit(getattr(stmt, "finalbody", []))

    visit(tree.body)
    return defs, imported, public


def _closure(
    start: _Def,
    defs: dict[str, _Def],
    imported: dict[str, set[str]],
    judge: Callable[[str, str], str | None],
    seen: set[str],
) -> set[str]:
    found = set(start.uses)
    found |= {w for r, a in start.private if (w := judge(r, a))}
    stack = list(start.refs)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in imported:
            found |= imported[name]
        if name in defs:
            found |= defs[name].uses
            found |= {w for r, a in defs[name].private if (w := judge(r, a))}
            stack.extend(defs[name].refs)
    return found


def _test_functions(tree: ast.Module) -> Iterable[tuple[str, ast.AST, ast.ClassDef | None]]:
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name.startswith(
            "test"
        ):
            yield stmt.name, stmt, None
        elif isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                if isinstance(
                    item, ast.FunctionDef | ast.AsyncFunctionDef
                ) and item.name.startswith("test"):
                    yield f"{stmt.name}::{item.name}", item, stmt


# Underscore names that are public API (namedtuple's), never a Monarch internal.
_PUBLIC_UNDERSCORE = frozenset(("_replace", "_asdict", "_fields", "_make", "_field_defaults"))


def _own_private_names(tree: ast.Module) -> set[str]:
    """The private names the file itself defines: functions, classes, assigned names and
    attributes, parameters and keywords."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            own.add(node.attr)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            own.add(node.arg)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("setattr", "getattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
        ):
            own.add(str(node.args[1].value))
    return {n for n in own if n.startswith("_")}


def _foreign_bindings(tree: ast.Module) -> set[str]:
    """Names bound anywhere in the file by imports of other packages (os, sys, asyncio)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "monarch":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] != "monarch"
            and node.module not in HELPERS
        ):
            names |= {a.asname or a.name for a in node.names}
    return names


_SETUP_METHODS = frozenset(
    [
        "setUp",
        "tearDown",
        "setUpClass",
        "tearDownClass",
        "setup_method",
        "teardown_method",
        "setup_class",
        "teardown_class",
        "asyncSetUp",
        "asyncTearDown",
    ]
)


def internal_uses(source: str) -> dict[str, list[str]]:
    """Per test (``name`` or ``Class::name``), the unmapped Monarch names it reaches.

    A test reaches what its body, decorators, fixtures (by parameter name, and every
    autouse fixture of its module or class) and, transitively, the module-level
    functions, classes and values they name read; in a class, also its set-up methods
    and the methods it calls through ``self``. Tests that reach nothing are absent.
    """
    tree = ast.parse(source)
    defs, imported, public = _module_bindings(tree)
    own = _own_private_names(tree)
    foreign = _foreign_bindings(tree)

    def judge(root: str, attr: str) -> str | None:
        # A private attribute of a Monarch object: reached from a Monarch name, or
        # one that the test file never defines, on anything but another package.
        if root in public:
            return f"{public[root]}.{attr} (private)"
        if attr not in own and attr not in _PUBLIC_UNDERSCORE and root not in foreign:
            return f"{root}.{attr} (private attribute the test file does not define)"
        return None

    autouse = [name for name, d in defs.items() if d.node is not None and _is_autouse(d.node)]
    result: dict[str, list[str]] = {}
    for key, fn, cls in _test_functions(tree):
        parts = [_scan(fn)]
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}  # type: ignore[attr-defined]
        if cls is not None:
            methods = {
                m.name: m for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            parts.append(
                _Def(
                    {n.id for b in cls.bases for n in ast.walk(b) if isinstance(n, ast.Name)}, set()
                )
            )
            parts.extend(_scan(d) for d in cls.decorator_list)
            wanted = [n for n in methods if n in _SETUP_METHODS or _is_autouse(methods[n])]
            wanted += [n for n in params if n in methods]
            called = {
                sub.attr
                for sub in ast.walk(fn)
                if isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id in ("self", "cls")
            }
            wanted += [n for n in called if n in methods]
            done: set[str] = set()
            while wanted:
                name = wanted.pop()
                if name in done:
                    continue
                done.add(name)
                parts.append(_scan(methods[name]))
                for sub in ast.walk(methods[name]):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                        and sub.attr in methods
                    ):
                        wanted.append(sub.attr)
        fixtures = [n for n in params if n in defs] + autouse
        merged = _Def(
            set().union(*(p.refs for p in parts)) | set(fixtures),
            set().union(*(p.uses for p in parts)),
            None,
            set().union(*(p.private for p in parts)),
        )
        found = _closure(merged, defs, imported, judge, set())
        if found:
            result[key] = sorted(found)
    return result


def analyse(tests_dir: Path) -> dict[str, dict[str, list[str]]]:
    """``internal_uses`` of every selected file found in ``tests_dir``, by file name."""
    return {
        name: internal_uses((tests_dir / name).read_text())
        for name in FILES
        if (tests_dir / name).is_file()
    }
