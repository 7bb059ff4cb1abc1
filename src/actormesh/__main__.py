"""``python -m actormesh``: the ``actormesh`` command (``actormesh top``, ``stacks``, ...)."""

from __future__ import annotations

import sys

from ._cli import main

sys.exit(main())
