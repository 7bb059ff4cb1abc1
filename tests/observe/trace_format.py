"""A checker of the Chrome Trace Event Format (JSON object form), as far as timelines use
it: the fields each phase needs, their types, async slices that open and close, and
complete events of one thread that nest rather than overlap. Perfetto's trace processor
would load the file too, but its Python package downloads its binary on first use, which
this machine cannot (no network): the checks here follow the format's specification
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)."""

from __future__ import annotations

import itertools
from typing import Any

PHASES = {"X", "B", "E", "b", "e", "n", "i", "M", "C"}
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def check_trace(trace: Any) -> list[dict[str, Any]]:
    """Raise AssertionError at the first departure from the format; return the events."""
    assert isinstance(trace, dict), "a trace in object form is a JSON object"
    events = trace["traceEvents"]
    assert isinstance(events, list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    open_async: dict[tuple[Any, ...], float] = {}
    complete: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for event in events:
        phase = event["ph"]
        assert phase in PHASES, event
        assert isinstance(event["name"], str) and event["name"], event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        if phase == "M":
            assert event["name"] in METADATA, event
            assert isinstance(event["args"], dict) and event["args"], event
            continue
        assert isinstance(event["ts"], int | float) and event["ts"] >= 0, event
        if phase == "X":
            assert isinstance(event["dur"], int | float) and event["dur"] >= 0, event
            complete.setdefault((event["pid"], event["tid"]), []).append(
                (event["ts"], event["ts"] + event["dur"])
            )
        if phase in ("b", "e"):
            assert isinstance(event["cat"], str), event
            key = (event["cat"], event["id"], event["name"], event["pid"])
            if phase == "b":
                assert key not in open_async, f"async slice opened twice: {event}"
                open_async[key] = event["ts"]
            else:
                assert key in open_async, f"async slice closed before it opened: {event}"
                assert event["ts"] >= open_async.pop(key), event
    assert not open_async, f"async slices never closed: {sorted(open_async)}"
    for track, spans in complete.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            # One thread's complete events follow each other (a message at a time); a
            # microsecond of rounding may touch.
            assert start >= end - 1, f"overlapping calls on {track}: {spans}"
    return events
