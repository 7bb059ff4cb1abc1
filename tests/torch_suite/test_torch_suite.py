"""torch's RPC test suites on actormesh.rpc: see ``torch_suite_harness``.

The default run takes the fast subset (``conftest.FAST``); ``ACTORMESH_TORCH_SUITE=full``
runs the whole selection, as ``scripts/torch-suite`` does on both backends.
"""

from __future__ import annotations

from torch_suite_harness import CLASSES

globals().update(CLASSES)
