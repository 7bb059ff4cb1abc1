"""Stacks of a mesh's ranks, grouped where ranks share one (``actormesh stacks``).

Each selected rank's process is asked for every thread's Python stack (an OBSERVE for
"stacks", see ``actormesh._core._snapshot``). A rank's text shows its actor's thread
(marked with the endpoint it runs), the awaited coroutines of a running ``async``
endpoint, the event loop's thread when it runs user code, and the threads the user's
code started; the runtime's own idle threads are left out. Ranks whose text is the same
(time running aside) form one group, so 16 ranks stuck in one collective and one rank
elsewhere read as two stacks::

    ranks 0-6, 8-15: running 'train_step' for 12.0-12.4 s
      ...
    rank 7: running 'train_step' for 12.4 s
      ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StackGroup", "Stacks", "format_ranks", "rank_stacks"]


@dataclass(frozen=True)
class StackGroup:
    """Ranks with the same stacks.

    Attributes:
        ranks: the ranks, ascending.
        state: what they do, with the range of their times (``running 'step' for 3.1 s``).
        stack: the stacks they share (indented text, may be empty).
    """

    ranks: tuple[int, ...]
    state: str
    stack: str

    def __str__(self) -> str:
        head = f"{format_ranks(self.ranks)}: {self.state}"
        return f"{head}\n{self.stack}" if self.stack else head


@dataclass(frozen=True)
class Stacks:
    """What every selected rank of a mesh is doing, as returned by ``mesh.stacks()``.

    ``print(stacks)`` shows the groups; ``stacks.by_rank[r]`` is rank ``r``'s own text.

    Attributes:
        mesh: the mesh's name.
        groups: ranks sharing a stack, in order of their first rank.
        by_rank: each rank's text (its state line, then its stacks).
    """

    mesh: str
    groups: tuple[StackGroup, ...]
    by_rank: dict[int, str] = field(default_factory=dict)

    def __str__(self) -> str:
        count = sum(len(group.ranks) for group in self.groups)
        lines = [f"{self.mesh} ({count} rank{'s' if count != 1 else ''})"]
        lines.extend(str(group) for group in self.groups)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Plain data for the ``actormesh`` command."""
        return {
            "mesh": self.mesh,
            "groups": [
                {"ranks": list(g.ranks), "state": g.state, "stack": g.stack} for g in self.groups
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stacks:
        """The inverse of ``to_json``."""
        groups = tuple(
            StackGroup(tuple(g["ranks"]), g["state"], g["stack"]) for g in data["groups"]
        )
        return cls(data["mesh"], groups)


def format_ranks(ranks: Sequence[int]) -> str:
    """``rank 7`` or ``ranks 0-6, 8-15``."""
    spans: list[str] = []
    start = prev = None
    for rank in sorted(ranks):
        if prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = rank
    if start is not None:
        spans.append(str(start) if start == prev else f"{start}-{prev}")
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(spans)}"


def _indent(text: str, by: str) -> str:
    return "\n".join(by + line for line in text.rstrip().splitlines())


def _state(actor: dict[str, Any] | None, process: dict[str, Any]) -> tuple[str, float | None]:
    """The state words without times (the grouping key) and the seconds running."""
    if "error" in process:
        return f"no answer ({process['error']})", None
    if actor is None:
        return "not in its process (stopped, or not built yet)", None
    if actor["state"] == "paused":
        return f"stopped at a breakpoint ({actor.get('paused_at') or '?'})", None
    if actor["state"] == "running":
        return f"running '{actor['endpoint']}'", actor.get("seconds")
    concurrent = actor.get("concurrent") or []
    if concurrent:
        return f"idle, concurrent endpoint(s) running: {', '.join(concurrent)}", None
    return "idle", None


def _body(actor: dict[str, Any] | None, process: dict[str, Any]) -> str:
    if actor is None or "threads" not in process:
        return ""
    blocks = []
    mine = actor.get("thread")
    endpoint = actor.get("endpoint")
    for thread in process["threads"]:
        name = thread["name"]
        if thread["ident"] == mine:
            if actor["state"] == "paused":
                title = "actor thread (at a breakpoint)"
            elif endpoint and not thread["ours"]:
                title = f"actor thread (running '{endpoint}')"
            else:
                continue  # idle, or running an async endpoint on the loop (see tasks)
        elif name.startswith("actor "):
            continue  # another actor of the same process: its own rank shows it
        elif thread["ours"]:
            continue  # the runtime's own threads, idle
        elif name == "MainThread":
            title = "event loop thread (blocked in user code)"
        else:
            title = f"thread '{name}'"
        blocks.append(f"  {title}:\n{_indent(thread['stack'], '  ')}")
    for task in actor.get("tasks") or []:
        if task.strip():
            what = f"'{endpoint}'" if endpoint else "a concurrent endpoint"
            blocks.append(f"  async {what} awaiting:\n{_indent(task, '  ')}")
    return "\n".join(blocks)


def _native_body(mesh: str, dump: dict[str, Any]) -> str:
    """A rank's threads as py-spy saw them (innermost frame first, as py-spy prints):
    its actor's threads, the process' other threads, not other actors' threads. The
    actor's threads are named as in the Python stacks (``actor thread``), without their
    coordinates, so ranks stuck in the same place group."""
    if "error" in dump:
        return f"  native stacks: {dump['error']}"
    mine = re.compile(rf"actor {re.escape(mesh)}($|[{{ ])")  # "actor trainer{'gpus': 3}"

    def title(name: str) -> str:
        if mine.match(name):
            return "actor loop thread" if name.endswith("(loop)") else "actor thread"
        return f"thread '{name}'"

    threads = [
        thread
        for thread in dump["threads"]
        # Another actor of the same process: its own rank shows it.
        if not (thread["name"] or "").startswith("actor ") or mine.match(thread["name"])
    ]
    holder = next((title(t["name"] or "?") for t in dump["threads"] if t["gil"]), None)
    blocks = [f"  GIL: held by {holder}" if holder else "  GIL: not held"]
    for thread in threads:
        # Not whether it was on a CPU (py-spy's "active"): that differs between ranks
        # stuck in the same place, which should group.
        head = title(thread["name"] or "?") + (" (holds the GIL)" if thread["gil"] else "")
        frames = "\n".join(f"    {frame}" for frame in thread["frames"]) or "    (no frames)"
        blocks.append(f"  {head}:\n{frames}")
    return "\n".join(blocks)


def _seconds(times: list[float]) -> str:
    if not times:
        return ""
    low, high = min(times), max(times)
    return f" for {low:.1f} s" if high - low < 0.05 else f" for {low:.1f}-{high:.1f} s"


def rank_stacks(
    mesh: str,
    ranks: Iterable[tuple[int, dict[str, Any] | None, dict[str, Any]]],
    native: dict[int, dict[str, Any]] | None = None,
) -> Stacks:
    """Group the ranks of ``mesh`` by their stacks.

    ``ranks``: ``(rank, its actor's entry in its process' answer or None, that answer)``.
    ``native``: each rank's process' threads as py-spy saw them
    (``_hosts._native_stacks``), shown instead of the Python stacks.
    """
    keyed: dict[tuple[str, str], list[tuple[int, float | None]]] = {}
    by_rank: dict[int, str] = {}
    for rank, actor, process in ranks:
        state, seconds = _state(actor, process)
        if native is not None:
            body = _native_body(mesh, native.get(rank) or {"error": "not asked"})
        else:
            body = _body(actor, process)
        keyed.setdefault((state, body), []).append((rank, seconds))
        own = state + (f" for {seconds:.1f} s" if seconds is not None else "")
        by_rank[rank] = f"{own}\n{body}" if body else own
    groups = []
    for (state, body), members in keyed.items():
        times = [s for _, s in members if s is not None]
        groups.append(
            StackGroup(tuple(sorted(r for r, _ in members)), state + _seconds(times), body)
        )
    groups.sort(key=lambda group: group.ranks[0])
    return Stacks(mesh, tuple(groups), by_rank)
