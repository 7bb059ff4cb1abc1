"""Layer 3: the processes of a host: starting, watching, restarting and ending them."""

from __future__ import annotations

from ._process import ChildProcess
from ._runtime import Runtime

__all__ = ["ChildProcess", "Runtime"]
