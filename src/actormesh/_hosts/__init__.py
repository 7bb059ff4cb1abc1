"""Layer 3: the processes of a host: starting, watching, restarting and ending them."""

from __future__ import annotations

from ._agent import dial_agent, serve_agent, serve_agent_listening
from ._agent_link import AgentLink, WorkerSpec
from ._debug_relay import SessionWatch
from ._event_log import KINDS as EVENT_KINDS
from ._event_log import default_state_dir
from ._joining import JoinWait, is_agent, join_order
from ._lifetime import serve
from ._native_stacks import native_stacks
from ._output import CURRENT_PREFIX
from ._process import WORKER_ARGS, ChildProcess, LaunchCommand, describe_exit
from ._progress import Progress
from ._remote import Joined, Status
from ._runtime import Runtime
from ._setup import ProcessSetup, prepare

__all__ = [
    "AgentLink",
    "CURRENT_PREFIX",
    "ChildProcess",
    "EVENT_KINDS",
    "JoinWait",
    "Joined",
    "LaunchCommand",
    "ProcessSetup",
    "Progress",
    "Runtime",
    "SessionWatch",
    "Status",
    "WORKER_ARGS",
    "WorkerSpec",
    "default_state_dir",
    "describe_exit",
    "dial_agent",
    "is_agent",
    "join_order",
    "native_stacks",
    "prepare",
    "serve",
    "serve_agent",
    "serve_agent_listening",
]
