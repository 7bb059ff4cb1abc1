"""Monarch's job telemetry and admin settings: accepted, nothing recorded.

As with ``get_meter``, ``span`` and ``traced`` in ``actormesh.actor``, a program that turns
Monarch's telemetry on runs unchanged: ``TelemetryConfig``/``MeshAdminConfig`` keep what
they are given, ``enable_telemetry``/``enable_admin`` record it, and ``state()``'s
``telemetry_url``, ``dashboard_url``, ``admin_url`` and query engine stay ``None``:
actormesh runs no telemetry service and no admin agent.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MeshAdminConfig", "TelemetryConfig"]


class _Settings:
    """Keyword settings kept as they were given."""

    def __init__(self, **settings: Any) -> None:
        self.settings = dict(settings)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in sorted(self.settings.items()))
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Settings)
            and type(other) is type(self)
            and other.settings == self.settings
        )

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self.settings))))


class TelemetryConfig(_Settings):
    """Monarch's distributed telemetry settings (accepted; actormesh records none)."""


class MeshAdminConfig(_Settings):
    """Monarch's mesh admin agent settings (accepted; actormesh has no admin agent:
    ``actormesh top`` and ``stacks`` look at a running job)."""
