"""``python -m actormesh._hosts._agent_main``: a host agent started by an allocator.

A module of its own because the package imports ``_agent``: ``-m actormesh._hosts._agent``
would load that module a second time as ``__main__`` (runpy warns about it on every
agent's start, on the user's terminal).
"""

from __future__ import annotations

from ._agent import main

if __name__ == "__main__":
    main()
