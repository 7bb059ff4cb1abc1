"""Replaces Monarch's tests/conftest.py on the actormesh side (compat/monarch_suite).

Monarch's own conftest loads its crash-recovery plugin, asks ``monarch._rust_bindings``
whether the tensor engine is built and skips files accordingly (the runner selects the
files itself). What it does for every test is kept: ``PYTHONPATH`` gets ``sys.path``, so
the processes a test starts import the test modules as pytest did.
"""

from __future__ import annotations

import os
import sys

os.environ["PYTHONPATH"] = os.pathsep.join(sys.path)
