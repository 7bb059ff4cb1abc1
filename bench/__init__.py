"""actormesh benchmark suite: actormesh against Monarch, Ray, torch.distributed.rpc and the floor.

Run everything with ``python -m bench`` (see ``bench/README.md``).
"""

from __future__ import annotations

__all__: list[str] = []
