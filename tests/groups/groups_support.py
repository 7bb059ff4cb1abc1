"""Helpers shared by the actor-group tests (plain functions, no fixtures)."""

from __future__ import annotations
