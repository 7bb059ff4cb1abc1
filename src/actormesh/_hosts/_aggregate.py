"""Identical lines of many ranks, shown once: ``[trainer {gpus=0..7}] x8 loss 0.31``.

The controller's copy of its workers' output (local pipes, and the ``EVENT output`` of
host agents) passes through here when ``Config.output_aggregate`` is on. Each line
already carries its actor's ``[mesh {coords}]`` prefix (written by the worker). Lines of
a mesh larger than ``output_aggregate`` ranks wait up to ``output_window`` seconds in a
*group* with the same mesh, stream and text; the same line from another rank within the
window joins the group, and the group is written once, with the ranks and their count.

Nothing is lost and each rank's order is kept: groups are written in the order they
were opened, and a rank's line joins the oldest waiting group opened after that rank's
previous line's group, so a rank printing ``A`` then ``B`` never sees ``B`` written first; a rank
printing the same line twice counts twice, in two groups. Lines of smaller meshes, and
lines that carry no actor prefix, go out at once, unless groups are waiting, in which
case they wait their turn behind them. Everything runs on the loop thread except
``declare``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import sys
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["LineAggregator", "format_points"]

_PREFIX = re.compile(r"\[(?P<mesh>[^\s\[\]]+) \{(?P<coords>[^{}]*)\}\] ?(?P<text>.*)", re.S)


@dataclass
class _Group:
    index: int
    stream: str
    mesh: str
    text: str  # the line after the prefix (or the whole line, for a pass-through)
    deadline: float
    points: list[str] = field(default_factory=list)  # coords text of each rank, in order
    raw: str | None = None  # a line written as it is


class LineAggregator:
    """Merges identical lines of large meshes (see the module docstring).

    Args:
        loop: the controller's loop; every method but ``declare`` runs on its thread.
        above: meshes with more ranks than this have their lines merged.
        window: seconds a line waits for the same line from other ranks.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, above: int, window: float) -> None:
        self._loop = loop
        self._above = above
        self._window = window
        self._shapes: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        self._queue: deque[_Group] = deque()
        self._open: dict[tuple[str, str, str], list[_Group]] = {}  # not written yet
        self._last: dict[tuple[str, str, str], int] = {}  # (stream, mesh, coords) -> group
        self._partial: dict[tuple[Hashable, str], str] = {}
        self._ids = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def set_window(self, window: float | None) -> None:
        """Merge within ``window`` seconds from now on; ``None``: do not merge."""
        if window is None:
            self._above = 1 << 62
        else:
            if window <= 0:
                raise ValueError(f"the aggregation window must be positive, not {window!r}")
            self._window = window

    def declare(self, mesh: str, labels: tuple[str, ...], sizes: tuple[int, ...]) -> None:
        """A mesh of this name and shape was spawned (any thread)."""
        self._shapes[mesh] = (tuple(labels), tuple(sizes))

    def feed(self, source: Hashable, stream: str, text: str) -> None:
        """Output of one source (a worker's pipe, an agent) for ``stream``; lines may be
        split across calls: the rest of a line waits for its end."""
        key = (source, stream)
        pending = self._partial.pop(key, "") + text
        *lines, tail = pending.split("\n")
        if tail:
            self._partial[key] = tail
        for line in lines:
            self._line(stream, line)

    def end(self, source: Hashable) -> None:
        """``source`` is done: an unfinished last line goes out as it is."""
        for key in [key for key in self._partial if key[0] == source]:
            self._line(key[1], self._partial.pop(key))

    def _big(self, mesh: str) -> bool:
        shape = self._shapes.get(mesh)
        if shape is None:
            return False
        count = 1
        for size in shape[1]:
            count *= size
        return count > self._above

    def _line(self, stream: str, line: str) -> None:
        now = self._loop.time()
        found = _PREFIX.fullmatch(line)
        if found is None or not self._big(found["mesh"]):
            if not self._queue:
                _write(stream, line + "\n")
                return
            group = _Group(next(self._ids), stream, "", "", now, raw=line)
            self._queue.append(group)
            return
        mesh, coords, text = found["mesh"], found["coords"], found["text"]
        rank_key = (stream, mesh, coords)
        after = self._last.get(rank_key, -1)
        candidates = self._open.setdefault((stream, mesh, text), [])
        fits = next((g for g in candidates if g.index > after), None)  # the oldest that fits
        if fits is not None:
            group = fits
        else:
            group = _Group(next(self._ids), stream, mesh, text, now + self._window)
            candidates.append(group)
            self._queue.append(group)
        group.points.append(coords)
        self._last[rank_key] = group.index
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is None and self._queue:
            delay = max(0.0, self._queue[0].deadline - self._loop.time())
            self._timer = self._loop.call_later(delay, self._due)

    def _due(self) -> None:
        self._timer = None
        now = self._loop.time()
        while self._queue and self._queue[0].deadline <= now:
            self._emit(self._queue.popleft())
        self._schedule()

    def flush(self) -> None:
        """Write every waiting line now (the processes are stopping, say)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._queue:
            self._emit(self._queue.popleft())

    def _emit(self, group: _Group) -> None:
        if group.raw is not None:
            _write(group.stream, group.raw + "\n")
            return
        key = (group.stream, group.mesh, group.text)
        candidates = self._open.get(key, [])
        if group in candidates:
            candidates.remove(group)
        if not candidates:
            self._open.pop(key, None)
        if len(group.points) == 1:
            line = f"[{group.mesh} {{{group.points[0]}}}] {group.text}"
        else:
            shape = self._shapes.get(group.mesh)
            where = format_points(group.points, shape)
            line = f"[{group.mesh} {where}] x{len(group.points)} {group.text}"
        _write(group.stream, line + "\n")


def _write(stream: str, text: str) -> None:
    target = getattr(sys, "stderr" if stream == "stderr" else "stdout")
    with contextlib.suppress(OSError, ValueError):
        target.write(text)
        target.flush()


def _spans(values: list[int]) -> str:
    spans: list[str] = []
    ordered = sorted(set(values))
    start = prev = ordered[0]
    for value in ordered[1:]:
        if value == prev + 1:
            prev = value
            continue
        spans.append(str(start) if start == prev else f"{start}..{prev}")
        start = prev = value
    spans.append(str(start) if start == prev else f"{start}..{prev}")
    return ",".join(spans)


def format_points(points: list[str], shape: tuple[tuple[str, ...], tuple[int, ...]] | None) -> str:
    """The ranks of a group in a prefix: ``{gpus=0..7}``, ``{dp=0..1, tp=0,2}`` when they
    form a box, else their flat ranks (``{ranks 0,3,5..6}``)."""
    parsed: list[dict[str, int]] = []
    for text in points:
        coords: dict[str, int] = {}
        for item in text.split(","):
            name, _, value = item.strip().partition("=")
            if value.strip().lstrip("-").isdigit():
                coords[name] = int(value)
        parsed.append(coords)
    labels = list(parsed[0])
    values = {label: sorted({p.get(label, -1) for p in parsed}) for label in labels}
    box = 1
    for label in labels:
        box *= len(values[label])
    if box == len(set(points)):
        return "{" + ", ".join(f"{label}={_spans(values[label])}" for label in labels) + "}"
    if shape is None:
        return "{" + "; ".join(points) + "}"
    names, sizes = shape
    ranks = []
    for coords in parsed:
        rank = 0
        for name, size in zip(names, sizes):
            rank = rank * size + coords.get(name, 0)
        ranks.append(rank)
    return "{ranks " + _spans(ranks) + "}"
