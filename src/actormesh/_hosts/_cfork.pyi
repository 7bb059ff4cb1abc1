# The fork of the fork server (see _cfork.c).
from __future__ import annotations

def fork_sibling() -> int: ...
