"""The base of ``monarch.job``'s names that need what actormesh does not have: each
raises ``NotImplementedError`` saying what (docs/from-monarch.md lists them)."""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


class _Unsupported:
    """A Monarch configuration or actor class actormesh has no counterpart of."""

    why = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}: {self.why}")
