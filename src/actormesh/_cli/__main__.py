"""``python -m actormesh._cli``: the ``actormesh`` command (for launchers such as torchrun)."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
