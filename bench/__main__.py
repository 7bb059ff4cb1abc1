"""``python -m bench``: run the whole suite (same as ``python -m bench.run``)."""

from __future__ import annotations

import sys

from bench.run import main

sys.exit(main())
