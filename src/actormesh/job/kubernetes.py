"""``monarch.job.kubernetes``'s names, which need a Kubernetes cluster (an API server, a
Monarch operator or pods to schedule workers in) that actormesh does not drive."""

from __future__ import annotations

from ._unsupported import _Unsupported

__all__ = ["ImageSpec", "KubeConfig", "KubernetesJob"]

_WHY = (
    "actormesh.job does not drive Kubernetes (no API client, operator or pods here); "
    "start `actormesh host --join` in your pods, or worker loops, and attach_to_workers()"
)


class KubernetesJob(_Unsupported):
    """Monarch's job of pods in a Kubernetes cluster."""

    why = _WHY


class ImageSpec(_Unsupported):
    """Monarch's container image of a ``KubernetesJob``."""

    why = _WHY


class KubeConfig(_Unsupported):
    """Monarch's Kubernetes client settings."""

    why = _WHY
