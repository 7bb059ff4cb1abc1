"""Conformance programs in Monarch's and Ray's own spelling, and their runner (``run.py``)."""

from __future__ import annotations
