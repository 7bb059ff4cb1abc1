"""``python -m actormesh._hosts._worker_loop_main``: one session of a worker loop.

A module of its own for the reason ``_agent_main`` is one: the package imports
``_worker_loop``, so ``-m`` on it would load it a second time (runpy warns on the
terminal of every session).
"""

from __future__ import annotations

from ._worker_loop import main

if __name__ == "__main__":
    main()
