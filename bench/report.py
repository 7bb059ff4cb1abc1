"""The results table: one row per metric, one column per system, then actormesh's ratios.

Rendered as a Markdown table, so the same text prints in a terminal and pastes into
the README.
"""

from __future__ import annotations

from typing import Any

from bench.catalog import Row, Workload, by_name

__all__ = ["format_value", "ratio", "render"]

_BASE = "actormesh"
# The floor is a bound, not a competitor; the pure-Python column is actormesh itself.
_NO_RATIO = {"floor", "actormesh_pure"}


def format_value(value: float, unit: str) -> str:
    """A figure with a precision that suits its unit."""
    if unit in ("s", "cores"):
        return f"{value:.2f}"
    if unit == "MiB":
        return f"{value:.1f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


_WORDS = {
    "MiB": ("smaller", "larger"),
    "cores": ("less", "more"),
}


def ratio(ours: float, theirs: float, row: Row) -> str:
    """``"12.3x faster"`` or ``"2.0x slower"``: actormesh against one peer."""
    better_word, worse_word = _WORDS.get(row.unit, ("faster", "slower"))
    # Compare what the table shows: below its precision (idle CPU of 0.003 cores) a
    # ratio would be noise, so a figure that shows as 0 is compared as 0.
    ours_shown, theirs_shown = format_value(ours, row.unit), format_value(theirs, row.unit)
    ours, theirs = _shown(ours_shown), _shown(theirs_shown)
    if ours == 0 or theirs == 0:
        return "same" if ours == theirs else f"{ours_shown} vs {theirs_shown}"
    if row.better == "lower":
        num, den = theirs, ours
    else:
        num, den = ours, theirs
    r = num / den
    if 0.95 <= r <= 1.05:
        return "same"
    return f"{r:.1f}x {better_word}" if r > 1 else f"{1 / r:.1f}x {worse_word}"


def _shown(text: str) -> float:
    return float(text.replace(",", ""))


def _metric(result: dict[str, Any] | None, key: str) -> float | None:
    if not result or result.get("status") != "ok":
        return None
    value = result.get("metrics", {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def _cell(result: dict[str, Any] | None, row: Row) -> str:
    if result is None:
        return "–"
    if result.get("status") != "ok":
        return str(result.get("status"))
    value = _metric(result, row.key)
    return "–" if value is None else format_value(value, row.unit)


def render(results: dict[str, Any]) -> str:
    """The Markdown table of a results document (as written by ``bench.run``)."""
    systems: dict[str, Any] = results["systems"]
    names = list(systems)
    peers = [n for n in names if n != _BASE and n not in _NO_RATIO] if _BASE in names else []
    labels = [systems[n].get("label", n) for n in names]
    header = ["workload", "metric", "unit", *labels, *(f"vs {systems[p]['label']}" for p in peers)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for wname in results["workloads"]:
        workload: Workload = by_name(wname)
        for row in workload.rows:
            cells = [_cell(systems[n]["workloads"].get(wname), row) for n in names]
            ratios = []
            ours = _metric(systems.get(_BASE, {}).get("workloads", {}).get(wname), row.key)
            for p in peers:
                theirs = _metric(systems[p]["workloads"].get(wname), row.key)
                ratios.append("" if ours is None or theirs is None else ratio(ours, theirs, row))
            lines.append("| " + " | ".join([wname, row.label, row.unit, *cells, *ratios]) + " |")
    return "\n".join(lines)
