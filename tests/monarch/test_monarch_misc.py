"""The small names of ``monarch.actor``: transports, identifiers, the bootstrap command,
configuration and telemetry, and the names actormesh refuses with a clear error."""

from __future__ import annotations

import inspect
import sys

import pytest

import actormesh.actor
from actormesh.actor import (
    ChannelTransport,
    ProcId,
    Uid,
    attach,
    config,
    debug_controller,
    default_bootstrap_cmd,
    get_meter,
    span,
    traced,
    unhandled_fault_hook,
)


def test_channel_transport_names_monarchs_transports() -> None:
    names = [
        "Local",
        "MetaQuicWithHostname",
        "MetaQuicWithIpV6",
        "MetaTlsWithHostname",
        "MetaTlsWithIpV6",
        "Quic",
        "TcpWithHostname",
        "TcpWithLocalhost",
        "Tls",
        "Unix",
    ]
    assert all(isinstance(getattr(ChannelTransport, name), ChannelTransport) for name in names)
    members = [getattr(ChannelTransport, name) for name in names]
    assert all(a != b for i, a in enumerate(members) for b in members[i + 1 :])


def test_a_labelled_uid_reads_label_then_value() -> None:
    uid = Uid.instance("trainer")
    assert str(uid).startswith("trainer<")
    assert str(uid).endswith(">")
    assert str(Uid.instance("trainer")) != str(uid)
    assert str(Uid.anonymous()) != str(Uid.anonymous())


def test_a_proc_id_has_a_uid_and_round_trips_through_its_string() -> None:
    uid = Uid.instance("worker")
    proc = ProcId(uid)
    assert proc.label == "worker"
    assert str(proc.uid) == str(uid)
    parsed = ProcId.from_string(str(proc))
    assert parsed == proc
    assert parsed.label == "worker"


def test_the_default_bootstrap_command_runs_this_python() -> None:
    command = default_bootstrap_cmd()
    assert command.program == sys.executable
    assert all(isinstance(arg, str) for arg in command.args)
    assert command.env == {}
    with_env = command.with_env({"A": "1"})
    assert with_env.env == {"A": "1"}
    assert with_env.program == command.program
    assert with_env.args == command.args


def test_config_has_the_log_prefix_setting() -> None:
    assert isinstance(config.prefix_python_logs_with_actor, bool)


def test_telemetry_can_be_used_and_changes_nothing() -> None:
    meter = get_meter()
    meter.create_counter("requests").add(1)
    meter.create_histogram("latency").record(0.5)
    with span("work"):
        done = True
    assert done

    @traced
    def plain(x: int) -> int:
        return x + 1

    def unnamed(x: int) -> int:
        return x + 2

    named = traced(name="named")(unnamed)

    assert plain(1) == 2
    assert named(1) == 3
    assert plain.__name__ == "plain"


def test_the_default_unhandled_fault_hook_takes_the_failure() -> None:
    assert actormesh.actor.unhandled_fault_hook is unhandled_fault_hook
    assert len(inspect.signature(unhandled_fault_hook).parameters) == 1


# Not Monarch's behaviour: actormesh has no debugger or gateway, and says so.


def test_debug_controller_says_there_is_no_remote_debugger() -> None:
    with pytest.raises(NotImplementedError, match="debugger"):
        debug_controller()


def test_attach_says_there_is_no_gateway() -> None:
    with pytest.raises(NotImplementedError, match="gateway"):
        attach("tcp://127.0.0.1:1")
