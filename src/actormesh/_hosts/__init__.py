"""Layer 3: the processes of a host: starting, watching, restarting and ending them."""

from __future__ import annotations

from ._agent import Agent, serve_agent
from ._agent_link import AgentLink, RelayedProcess, WorkerSpec
from ._cast_plan import Plan
from ._debug_relay import SessionWatch
from ._dial import dial_agent
from ._event_log import KINDS as EVENT_KINDS
from ._event_log import default_state_dir
from ._joining import JoinWait, is_agent, join_order
from ._lease_line import AttachRefusedError, ask
from ._lifetime import serve
from ._native_stacks import native_stacks
from ._output import CURRENT_PREFIX
from ._process import WORKER_ARGS, ChildProcess, LaunchCommand, describe_exit
from ._progress import Progress
from ._remote import Joined, Status
from ._runtime import Runtime
from ._setup import ProcessSetup, prepare
from ._tree import check_fan_out
from ._worker_loop import serve_worker_loop

__all__ = [
    "Agent",
    "AgentLink",
    "AttachRefusedError",
    "CURRENT_PREFIX",
    "ChildProcess",
    "EVENT_KINDS",
    "JoinWait",
    "Joined",
    "LaunchCommand",
    "Plan",
    "ProcessSetup",
    "Progress",
    "RelayedProcess",
    "Runtime",
    "SessionWatch",
    "Status",
    "WORKER_ARGS",
    "WorkerSpec",
    "ask",
    "check_fan_out",
    "default_state_dir",
    "describe_exit",
    "dial_agent",
    "is_agent",
    "join_order",
    "native_stacks",
    "prepare",
    "serve",
    "serve_agent",
    "serve_worker_loop",
]
