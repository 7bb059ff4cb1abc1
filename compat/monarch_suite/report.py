"""The comparison: P/N, the share of Monarch's passes, and the failures by cause.

N counts the selected tests (public-API files, tests reaching no Monarch internal) that
the control runs, i.e. does not skip; C of them pass on Monarch and P on actormesh. The
bar is the share of the C that actormesh passes (``TARGET``). Not counted, and listed:
tests that use internals (found from their source before the run, or at run time on
actormesh), tests Monarch skips, and tests that fail on Monarch (these stay in N).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from .selection import EXCLUDED, EXCLUDED_FOLDERS, FILES

TARGET = 0.95

# Known causes of an actormesh failure: a regex searched in "<test id>\n<error line>"
# (the test id is "test_file.py::test_name[params]"), and the reason, which says what
# Monarch does and what actormesh did. The first that matches wins; a failure that none
# matches is "unexplained: <error line>".
CAUSES: list[tuple[str, str]] = [
    # -- supervision and faults
    (
        r"test_actor_init_exception(_sync)?\[2-.*\n.*(Timed out waiting for faults|TimeoutError)",
        "unhandled_fault_hook after an __init__ failure on 2 ranks: Monarch calls it once per "
        "failed rank (2 MeshFailures); actormesh calls it once, for the mesh",
    ),
    (
        r"test_supervision_hierarchy\.py::.*\n.*Expected fault message to contain",
        "MeshFailure.report() text: Monarch's names the actor as <module.Class name{'dim': "
        "i/n}> and says 'The actor ... and all its descendants have failed: ...' or 'the "
        "process this actor was running on failed: Killed(sig=9)'; actormesh's says "
        "\"actor mesh 'X' ranks [0] failed (...)\"",
    ),
    (
        r"test_supervision_runs_before_a_message_backlog\n.*__supervise__",
        "__supervise__ for a child failure that arrives while a sync endpoint runs: Monarch "
        "runs it next, before the messages queued behind; actormesh after them",
    ),
    (
        r"test_a_base_exception_drains_then_cleans_up\n.*'after'",
        "a sync endpoint that raises a BaseException (not an Exception): Monarch's actor "
        "dies and runs no further queued message before __cleanup__; actormesh ran the next "
        "queued message first",
    ),
    (
        r"test_sync_actor_driver\.py::.*\n.*'thread': \"actor ",
        "the thread a sync actor's handlers run on: Monarch names it 'monarch-actor-driver' "
        '(the test checks the name); actormesh names it "actor <mesh>{coords}"',
    ),
    # -- errors
    (
        r"test_concurrent_endpoint_exception_uses_actor_error_context\n.*did not match",
        "str(ActorError): Monarch's starts 'Actor call <actor name>.<endpoint> failed.' and "
        "then the remote traceback; actormesh's is '<Type>: <message> (raised by endpoint "
        "...)'",
    ),
    (
        r"test_concurrent_endpoint_rejects_endpoint_chaining\n.*did not match",
        "@concurrent_endpoint stacked on @endpoint: both raise ValueError, Monarch's saying "
        "'concurrent_endpoint does not wrap @endpoint; pass endpoint options to "
        "@concurrent_endpoint', actormesh's 'concurrent_endpoint can only wrap async endpoints'",
    ),
    (
        r"test_actor_mixing_sync_and_async_endpoints_is_rejected_at_spawn\n.*DID NOT RAISE",
        "an actor mixing def and async def endpoints: Monarch's spawn raises ValueError "
        "('mixes both async and sync'); actormesh allows it (documented difference)",
    ),
    (
        r"test_as_endpoint_rejects_an_async_method_on_a_sync_actor\n.*DID NOT RAISE",
        "as_endpoint(actor.async_method) on an actor whose endpoints are all def: Monarch "
        "fails the call with ActorError 'is an async def method' (a sync actor has no event "
        "loop); actormesh runs the coroutine",
    ),
    # -- meshes and processes
    (
        r"SerializationError: cannot pickle .*_processes\.children",
        "a ProcMesh passed as an argument (to spawn() or an endpoint): Monarch pickles it as "
        "a reference the receiving actor can spawn on; actormesh's ProcMesh does not pickle "
        "(it holds its processes' Popen objects)",
    ),
    (
        r"test_errors_propagated\n.*spawn_procs\(\) waits",
        "this_host().spawn_procs() inside an async endpoint: Monarch returns the mesh at "
        "once; actormesh raises RuntimeError (documented difference: it waits for the "
        "processes)",
    ),
    (
        r"has no attribute 'proc_mesh'",
        "context().actor_instance.proc_mesh (the ProcMesh the actor runs on; for a controller "
        "from get_or_spawn_controller, the client's own proc, so spawn() there runs in the "
        "client process): missing on actormesh's Instance",
    ),
    (
        r"test_del_runs_on_proc_mesh_stop\n.*finalized",
        "ProcMesh.stop(): Monarch's worker processes exit through interpreter finalization "
        "(a module global's __del__ runs); actormesh's exit without it",
    ),
    (
        r"test_actor_loop_shutdown_cancels_concurrent_endpoint",
        "ProcMesh.stop() while a @concurrent_endpoint is still running: Monarch cancels its "
        "task (CancelledError inside it, its finally runs) before __cleanup__; actormesh "
        "stops without cancelling it",
    ),
    (
        r"test_actor_tls\n.*_thread\._local",
        "threads of an async actor: Monarch runs __init__ and the async endpoints on one "
        "thread (a threading.local set in __init__ is seen by endpoints); actormesh runs "
        "__init__ on another thread",
    ),
    (
        r"test_rank_string\n",
        "str(current_rank()): Monarch's is \"{'hosts': 0/1, 'gpus': 0/2}\" (name: index/"
        "size); actormesh's '{hosts=0, gpus=0}'",
    ),
    (
        r"unexpected keyword argument 'bootstrap_command'",
        "HostMesh.spawn_procs(bootstrap_command=BootstrapCommand), e.g. "
        "default_bootstrap_cmd().with_env({...}) to set or remove variables in the new procs: "
        "no such parameter in actormesh (it has bootstrap=, a set-up function)",
    ),
    (
        r"'BootstrapCommand' object has no attribute 'inherit_env'",
        "default_bootstrap_cmd().inherit_env: True in Monarch (procs inherit their host's "
        "environment; .env holds only the overrides); missing in actormesh",
    ),
    (
        r"has no attribute 'is_fake_in_process'",
        "HostMesh.is_fake_in_process (False for this_host() on the client): missing",
    ),
    (
        r"has no attribute 'with_python_executable'",
        "HostMesh.with_python_executable(path): run the procs (and those they spawn in turn) "
        "with another Python or a wrapper; missing",
    ),
    # -- workers and addresses
    (
        r"test_fd_bootstrap\n",
        "run_worker_loop_forever(address='tcp://127.0.0.1:fdN', ca='trust_all_connections'): "
        "Monarch serves on the inherited listening socket fd N; actormesh's worker exits "
        "(no ACTORMESH_SECRET, and 'fdN' is no port to it)",
    ),
    (
        r"test_simple_bootstrap\n.*is not a number",
        "ipc://PATH worker addresses (run_worker_loop_forever, attach_to_workers): Monarch "
        "serves and dials Unix sockets; actormesh reads every worker address as tcp:// "
        "('the port of tcp://ipc://... is not a number') and its worker also needs "
        "ACTORMESH_SECRET",
    ),
    (
        r"test_alias_bootstrap\n",
        "alias worker addresses 'tcp://DIAL:PORT@tcp://0.0.0.0:PORT' (advertise one address, "
        "bind another): actormesh takes '127.0.0.1:PORT@tcp' for a host name (gaierror); its "
        "worker also needs ACTORMESH_SECRET",
    ),
    (
        r"(test_spawn_procs_bootstrap_command_uses_remote_host_environment\n.*"
        r"ConnectionRefused)|(test_dropped_start_keeps_serving.*\n.*worker child failed)",
        "a worker started with run_worker_loop_forever / start_worker_loop_forever("
        "ca='trust_all_connections') and no ACTORMESH_SECRET: Monarch's serves; actormesh's "
        "raises 'needs the job's secret in ACTORMESH_SECRET', so attach_to_workers is refused",
    ),
    # -- ports, futures, returns_future
    (
        r"test_receive_ownership_characterization\.py::.*\n.*(timed out|assert 22 == 11)",
        "PortReceiver.recv(): Monarch claims a message when the returned Future is first "
        "observed (get/await), so a discarded recv() takes nothing and the first observed "
        "gets the first message; actormesh's recv() claims the next message when called",
    ),
    (
        r"test_direct_construction_is_rejected\n.*DID NOT RAISE",
        "Future(): Monarch's constructor raises TypeError ('Future objects are returned by "
        "Monarch operations'); actormesh's accepts it (documented difference)",
    ),
    (
        r"test_first_observer_owns_the_body\n",
        "@returns_future: Monarch runs the body only when the Future is first observed (an "
        "unobserved call never runs); actormesh runs it at once (documented difference)",
    ),
    (
        r"test_get_timeout_cancels_the_body\n",
        "@returns_future Future.get(timeout) that times out: Monarch cancels the body (its "
        "finally runs; later get() raises TimeoutError); actormesh leaves it running",
    ),
    (
        r"test_other_observers_wait_on_the_handle\n",
        "@returns_future observed from two threads: in Monarch the first get() owns the body "
        "and others wait (or time out) on it; on actormesh the owner thread's get() did not "
        "return the value in time",
    ),
    (
        r"test_thread_exit_shuts_its_loop_down\n",
        "@returns_future .get() on a plain thread: Monarch runs the body on that thread's "
        "own event loop and closes it (finalizing async generators) when the thread exits; "
        "actormesh's loop stays open",
    ),
    (
        r"test_started_task_is_held\n.*unexpectedly None",
        "@returns_future body started through .as_asyncio(), observer cancelled and dropped: "
        "Monarch holds the body's task; on actormesh it can be garbage-collected (flaky: "
        "failed in 1 of 2 runs here)",
    ),
    # -- logging
    (
        r"(test_actor_logging_smoke\n.*actor prefix)|(test_instance_name\n.*AssertionError)",
        "log records in actors: Monarch prefixes the message with '[actor=<module.Class "
        "name{coords}>]' through a filter on the root logger in every actor process (so the "
        "actor's own handlers, FileHandlers too, write it; the client's are 'actor=<root>'; "
        "config.prefix_python_logs_with_actor turns it off); actormesh adds none",
    ),
    # -- rdma
    (
        r"test_read_into_remote_smaller_than_local.*\n.*do not fit",
        "RDMABuffer.read_into(dst) with dst larger than the remote buffer: Monarch copies "
        "the whole remote buffer into dst's leading bytes; actormesh raises ValueError",
    ),
    (
        r"test_submit_validation_errors_surface.*\n.*Expected ValueError",
        "RDMAAction.write_remote(buffer, src) with src larger than the remote buffer: "
        "Monarch raises ValueError when the operation is added; actormesh does not",
    ),
]

# Failures on actormesh that show the test uses a Monarch internal after all (found at
# run time, so not counted): a regex searched in the error and its traceback.
RUNTIME_INTERNAL: list[tuple[str, str]] = [
    (r"monarch internal used: ([\w.]+(?:\([^)]*\))?)", "uses {0} (at run time)"),
    (
        r"AttributeError: (?:type object |')'?(\w+)'(?: object)? has no attribute '(_[A-Za-z]\w*)'",
        "uses the private attribute {1} of Monarch's {0}",
    ),
]

Records = dict[str, dict[str, Any]]


def _outcome(records: Records, name: str) -> str:
    return str(records.get(name, {}).get("outcome", "not run"))


def _line(record: dict[str, Any]) -> str:
    error = str(record.get("error") or record.get("outcome", "not run"))
    return error.strip().splitlines()[0][:300] if error.strip() else "(no message)"


_FRAME = re.compile(r'File "([^"]+)", line \d+|^(\S+\.py):\d+: ', re.MULTILINE)


def _raised_in_test_code(detail: str) -> bool:
    """Whether the innermost frame of ``detail`` is the test's code (not actormesh's)."""
    frames = _FRAME.findall(detail)
    if not frames:
        return True
    where = next(f for f in frames[-1] if f)
    return "tests/" in where or where == "<dynamic-code>"


def runtime_internal(record: dict[str, Any]) -> str | None:
    """Why an actormesh failure shows a use of Monarch internals, or None.

    A stand-in's MonarchInternalUsed counts wherever it shows; an AttributeError about
    a private name only when the test's own code raised it (not actormesh's).
    """
    if record.get("outcome") not in ("failed", "error"):
        return None
    text = f"{record.get('error', '')}\n{record.get('detail', '')}"
    for index, (pattern, reason) in enumerate(RUNTIME_INTERNAL):
        found = re.search(pattern, text)
        if found and (index == 0 or _raised_in_test_code(str(record.get("detail", "")))):
            return reason.format(*found.groups())
    return None


def cause(name: str, record: dict[str, Any]) -> str:
    """The known cause of actormesh's failure of ``name``, or 'unexplained: <error>'."""
    line = _line(record)
    for pattern, reason in CAUSES:
        if re.search(pattern, f"{name}\n{line}"):
            return reason
    prefix = "timeout: " if record.get("timeout") and "Timeout" not in line else ""
    return f"unexplained: {prefix}{line}"


def _file_of(name: str) -> str:
    return name.split("::", 1)[0]


def _with_collect_errors(side: dict[str, Any], names: set[str]) -> Records:
    """The side's tests, where a file that failed to import counts its tests as failed."""
    tests: Records = dict(side.get("tests", {}))
    for name in names:
        info = side.get("files", {}).get(_file_of(name), {})
        if name not in tests and info.get("collect_error"):
            tests[name] = {
                "outcome": "error",
                "error": f"collection error: {info['collect_error']}",
                "detail": info.get("collect_detail", ""),
            }
    return tests


def summarize(
    mine_side: dict[str, Any],
    control_side: dict[str, Any],
    static: dict[str, dict[str, list[str]]],
    only_files: set[str] | None,
) -> tuple[list[str], bool]:
    """The report's lines, and whether actormesh reaches the target."""
    names = set(mine_side.get("tests", {})) | set(control_side.get("tests", {}))
    # A saved record may hold tests that the static analysis now leaves out.
    names = {
        n for n in names if n.split("[", 1)[0].split("::", 1)[1] not in static.get(_file_of(n), {})
    }
    if only_files is not None:
        names = {n for n in names if _file_of(n) in only_files}
    mine = _with_collect_errors(mine_side, names)
    control = _with_collect_errors(control_side, names)
    found_late = {n: r for n in names if (r := runtime_internal(mine.get(n, {})))}
    skipped = {n for n in names if _outcome(control, n) in ("skipped", "xfailed", "not run")}
    selection = sorted(n for n in names if n not in found_late and n not in skipped)
    passed = [n for n in selection if _outcome(mine, n) == "passed"]
    passed_control = [n for n in selection if _outcome(control, n) == "passed"]
    both = [n for n in passed_control if _outcome(mine, n) == "passed"]
    share = len(both) / len(passed_control) if passed_control else 0.0
    needed = math.ceil(TARGET * len(passed_control))
    lines = [
        f"{len(passed)}/{len(selection)} passed (control: {len(passed_control)}/{len(selection)})",
        "",
        f"of the {len(passed_control)} tests Monarch passes, actormesh passes {len(both)} "
        f"({100 * share:.1f}%)",
        f"target: {100 * TARGET:.0f}% of them ({needed}/{len(passed_control)}): "
        + ("met" if passed_control and len(both) >= needed else "NOT met"),
    ]
    causes: dict[str, list[str]] = defaultdict(list)
    for name in passed_control:
        if _outcome(mine, name) != "passed":
            causes[cause(name, mine.get(name, {}))].append(name)
    if causes:
        lines += ["", "failures by cause (tests Monarch passes):"]
        for reason, tests in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"  {len(tests):4d}  {reason}")
            lines += [f"          {t}" for t in tests]
    failing_control = [n for n in selection if n not in passed_control]
    if failing_control:
        lines += ["", f"fail on Monarch too (in N, not in C) ({len(failing_control)}):"]
        for name in failing_control:
            lines.append(
                f"  {name}\n      Monarch: {_line(control.get(name, {}))}\n"
                f"      actormesh: {_outcome(mine, name)}"
            )
    lines += _not_counted(names, static, found_late, skipped, control, only_files)
    return lines, bool(passed_control) and len(both) >= needed


def _not_counted(
    names: set[str],
    static: dict[str, dict[str, list[str]]],
    found_late: dict[str, str],
    skipped: set[str],
    control: Records,
    only_files: set[str] | None,
) -> list[str]:
    lines: list[str] = []
    statics = [
        (f"{f}::{t}", uses)
        for f, tests in sorted(static.items())
        if only_files is None or f in only_files
        for t, uses in sorted(tests.items())
    ]
    if statics:
        lines += [
            "",
            f"not counted, not run: the test's code reaches a Monarch internal ({len(statics)}):",
        ]
        lines += [f"  {t}: {', '.join(u)}" for t, u in statics]
    if found_late:
        lines += [
            "",
            f"not counted: used a Monarch internal at run time on actormesh ({len(found_late)}):",
        ]
        lines += [f"  {t}: {why}" for t, why in sorted(found_late.items())]
    if skipped:
        by_reason: dict[str, list[str]] = defaultdict(list)
        for name in sorted(skipped):
            record = control.get(name, {})
            by_reason[f"{_outcome(control, name)}: {_line(record)}"].append(name)
        lines += ["", f"not counted: skipped (or not run) on Monarch ({len(skipped)}):"]
        for reason, tests in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"  {len(tests):4d}  {reason}")
            lines += [f"          {t}" for t in tests]
    if only_files is None:
        lines += [
            "",
            f"test files not run ({len(EXCLUDED)} files, {len(EXCLUDED_FOLDERS)} folders):",
        ]
        lines += [f"  {f}: {why}" for f, why in sorted(EXCLUDED.items())]
        lines += [f"  {d}/: {why}" for d, why in sorted(EXCLUDED_FOLDERS.items())]
    del names
    return lines


def unclassified(available: list[str]) -> list[str]:
    """Test files found that neither FILES nor EXCLUDED names (a newer Monarch's)."""
    return [f for f in available if f not in FILES and f not in EXCLUDED]
