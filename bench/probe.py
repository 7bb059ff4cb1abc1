"""``python -m bench.probe SYSTEM``: the fresh interpreter the ``spawn_4`` workload times.

It imports the system, creates 4 actors in 4 processes, prints ``READY`` once each
has answered, then stops them. The parent measures from exec to ``READY``.
"""

from __future__ import annotations

import sys

from bench.systems import entry


def main(argv: list[str]) -> int:
    """Run the probe for the system named in ``argv[0]``."""
    entry(argv[0]).load().probe()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
