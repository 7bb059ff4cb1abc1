"""``actormesh top``: a live view of a running job, refreshed about once a second.

Built on Textual (https://textual.textualize.io): its data table, key bindings with a
footer that shows them, and modal screens give a keyboard-driven view in a few hundred
lines, and it draws with plain terminal sequences, so it works over SSH and in tmux and
lays itself out again when the terminal is resized. The view fits an 80x24 terminal.
It only reads: nothing it does changes the job.

One line per rank: mesh, rank, host, pid, state (idle, running which endpoint and for how
long, stopped at a breakpoint, silent, dead), queued messages, calls in flight from the
controller, errors, restarts, the 50th/99th percentile run time of the endpoint running
(else the one called most), CPU and resident memory. Enter shows one rank's endpoints.

``v`` switches to the services (``spawn_service``): one line per replica, with its state,
queue, calls in flight, answered and failed calls, requests per second, restarts, weight
version and processes; Enter there shows that replica's ranks.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static

from ._client import JobClient, JobError, find_job

__all__ = ["TopApp", "top"]

# (key, title, width, right-aligned): with a space before each, 79 columns in all.
COLUMNS = (
    ("mesh", "MESH", 7, False),
    ("rank", "RANK", 4, True),
    ("host", "HOST", 6, False),
    ("pid", "PID", 6, True),
    ("state", "STATE", 12, False),
    ("queued", "Q", 3, True),
    ("in_flight", "INF", 3, True),
    ("errors", "ERR", 3, True),
    ("restarts", "RST", 3, True),
    ("p50", "P50", 5, True),
    ("p99", "P99", 5, True),
    ("cpu", "CPU%", 4, True),
    ("rss", "RSS", 5, True),
)
# The services view: one line per replica (79 columns too).
SERVICE_COLUMNS = (
    ("service", "SERVICE", 10, False),
    ("replica", "REP", 3, True),
    ("state", "STATE", 10, False),
    ("queued", "Q", 3, True),
    ("in_flight", "INF", 3, True),
    ("completed", "DONE", 7, True),
    ("failed", "FAIL", 4, True),
    ("rate", "REQ/S", 6, True),
    ("restarts", "RST", 3, True),
    ("version", "VER", 4, True),
    ("pids", "PIDS", 15, False),
)
SORTS = ("rank", "state", "cpu", "rss", "queued", "p99", "errors")

HELP = """\
actormesh top: one line per rank of every mesh of the job

  q          quit                  ?        this help
  s          next sort order       r        reverse the order
  m          next mesh (filter)    /        filter by mesh name
  Esc        clear the filter      Enter    the selected rank's endpoints
  up/down    select a rank         p        pause / resume refreshing
  v          ranks / services      Enter    (services) the replica's ranks

STATE   idle | running ENDPOINT TIME | stopped at a breakpoint |
        silent (its process did not answer) | dead
Q       messages queued for the actor     INF  the controller's calls in it
ERR     endpoint calls that raised        RST  restarts of its process
P50/P99 run time of the endpoint running (else the one called most)
CPU%    of one core, since the last refresh; RSS: resident memory
Services: one line per replica; DONE/FAIL calls answered/failed,
        REQ/S answered per second lately, VER its weight version

Press any key to close."""


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f}u"
    if value < 1:
        return f"{value * 1e3:.0f}m"
    if value < 100:
        return f"{value:.1f}s"
    return f"{value / 60:.0f}min"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit in ("B", "K") else f"{value:.1f}{unit}"[:5]
        value /= 1024  # type: ignore[assignment]
    return "-"


def state_text(row: dict[str, Any]) -> str:
    """The STATE cell: ``idle``, ``run step 12s``, ``breakpoint``, ``silent``, ``dead``."""
    state = row["state"]
    if state == "running":
        return f"{row['endpoint']} {_seconds(row['seconds'])}"
    if state == "paused":
        return "breakpoint"
    return str(state)


def cells(mesh: dict[str, Any], row: dict[str, Any]) -> dict[str, str]:
    """The text of each column for one rank."""
    cpu = row.get("cpu")
    return {
        "mesh": mesh["name"],
        "rank": str(row["rank"]),
        "host": str(row["host"]),
        "pid": str(row["pid"] or "-"),
        "state": state_text(row),
        "queued": str(row["queued"]),
        "in_flight": str(row["in_flight"]),
        "errors": str(row["errors"]),
        "restarts": str(row["restarts"]),
        "p50": _seconds(row["p50"]),
        "p99": _seconds(row["p99"]),
        "cpu": "-" if cpu is None else f"{cpu:.0f}",
        "rss": _bytes(row["rss"]),
    }


def service_cells(service: dict[str, Any], replica: dict[str, Any]) -> dict[str, str]:
    """The text of each column for one replica of a service."""
    version = replica["version"]
    return {
        "service": service["name"],
        "replica": str(replica["replica"]),
        "state": replica["state"],
        "queued": str(replica["queued"]),
        "in_flight": str(replica["in_flight"]),
        "completed": str(replica["completed"]),
        "failed": str(replica["failed"]),
        "rate": f"{replica['requests_per_s']:.1f}",
        "restarts": str(replica["restarts"]),
        "version": "-" if version is None else str(version),
        "pids": ",".join(str(pid) for pid in replica["pids"]) or "-",
    }


def _sort_key(name: str, row: dict[str, Any]) -> Any:
    if name == "state":
        order = {"dead": 0, "silent": 1, "paused": 2, "running": 3}.get(row["state"], 4)
        return (order, -(row["seconds"] or 0.0))
    if name == "rank":
        return row["rank"]
    value = row.get(name)
    return -(value or 0)


class HelpScreen(ModalScreen[None]):
    """The keys and what the columns mean."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: 78; height: auto; border: round $accent; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")

    def on_key(self) -> None:
        self.dismiss()


class RankScreen(ModalScreen[None]):
    """One rank's endpoints: calls, errors, run times; and the round trips seen."""

    DEFAULT_CSS = """
    RankScreen { align: center middle; }
    RankScreen > Static { width: 78; height: auto; max-height: 22; border: round $accent;
                          padding: 0 1; }
    """

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.text, id="rank")

    def on_key(self) -> None:
        self.dismiss()


def rank_details(mesh: dict[str, Any], row: dict[str, Any]) -> str:
    """The text of the rank screen."""
    point = ", ".join(f"{k}={v}" for k, v in row["point"].items())
    lines = [
        f"{mesh['name']} {{{point}}}  rank {row['rank']}  pid {row['pid']} on {row['host']}",
        f"state: {state_text(row)}"
        + (f" at {row['paused_at']}" if row.get("paused_at") else "")
        + (f" ({row['error']})" if row.get("error") else ""),
        f"queued {row['queued']}  in flight {row['in_flight']}  concurrent "
        f"{row['concurrent']}  restarts {row['restarts']}",
        "",
        f"{'ENDPOINT':<24} {'CALLS':>8} {'ERRORS':>7} {'P50':>8} {'P99':>8}",
    ]
    for name, stats in sorted(row["endpoints"].items()):
        lines.append(
            f"{name[:24]:<24} {stats['calls']:>8} {stats['errors']:>7} "
            f"{_seconds(stats['p50']):>8} {_seconds(stats['p99']):>8}"
        )
    if not row["endpoints"]:
        lines.append("(no endpoint called yet)")
    lines += [
        "",
        f"round trips from the controller: p50 {_seconds(row['rtt_p50'])}, "
        f"p99 {_seconds(row['rtt_p99'])}",
        "",
        "Press any key to close.",
    ]
    return "\n".join(lines)


class TopApp(App[None]):
    """The ``actormesh top`` application (see the module docstring)."""

    TITLE = "actormesh top"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #head { height: auto; max-height: 6; }
    #filter { display: none; height: 3; }
    #filter.shown { display: block; }
    DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[Any]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("s", "sort", "Sort"),
        Binding("r", "reverse", "Reverse"),
        Binding("m", "next_mesh", "Mesh"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear", show=False),
        Binding("p", "pause", "Pause"),
        Binding("v", "view", "View"),
        Binding("enter", "details", "Details", show=False),
    ]

    def __init__(
        self, client: JobClient, mesh: str | None, interval: float, services: bool = False
    ) -> None:
        super().__init__()
        self.client = client
        self.interval = interval
        self.filter = mesh or ""
        self.services = services  # the services view, else the ranks
        self.sort = "rank"
        self.reverse = False
        self.paused = False
        self.snapshot: dict[str, Any] | None = None
        self.problem = ""
        self._rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._columns: tuple[tuple[str, str, int, bool], ...] = ()
        self._fetching = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("connecting...", id="head")
            yield Input(placeholder="mesh name (Enter applies, Esc clears)", id="filter")
            table: DataTable[Text] = DataTable(cursor_type="row", cell_padding=0)
            yield table
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.fetch()
        self.set_interval(self.interval, self.fetch)

    # -- data ----------------------------------------------------------------------------

    def fetch(self) -> None:
        if self.paused or self._fetching:
            return
        self._fetching = True
        self.run_worker(self._fetch, thread=True, exclusive=True, group="fetch")

    def _fetch(self) -> None:
        try:
            snapshot: dict[str, Any] | None = self.client.request("snapshot")
            problem = ""
        except JobError as error:
            snapshot, problem = None, str(error)
        self.call_from_thread(self._show, snapshot, problem)

    def _show(self, snapshot: dict[str, Any] | None, problem: str) -> None:
        self._fetching = False
        if snapshot is not None:
            self.snapshot = snapshot
        self.problem = problem
        self._draw()

    def _visible(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
        if self.services:
            for service in (self.snapshot or {}).get("services", []):
                rows.extend((service, replica) for replica in service["replicas"])
            return rows
        for mesh in (self.snapshot or {}).get("meshes", []):
            if self.filter and self.filter not in mesh["name"]:
                continue
            rows.extend((mesh, row) for row in mesh["ranks"])
        rows.sort(key=lambda pair: (_sort_key(self.sort, pair[1]), pair[0]["name"]))
        if self.reverse:
            rows.reverse()
        return rows

    def _draw(self) -> None:
        self.query_one("#head", Static).update(self._head())
        table = self.query_one(DataTable)
        columns = SERVICE_COLUMNS if self.services else COLUMNS
        if columns is not self._columns:  # the view changed: its own columns
            table.clear(columns=True)
            for key, title, width, right in columns:
                label = Text(" " + (title.rjust(width) if right else title.ljust(width)))
                table.add_column(label, key=key, width=width + 1)
            self._columns = columns
        keep = table.cursor_row
        rows = self._visible()
        table.clear()
        for owner, row in rows:
            if self.services:
                text, key = service_cells(owner, row), f"{owner['name']}/{row['replica']}"
            else:
                text, key = cells(owner, row), f"{owner['id']}/{row['rank']}"
            table.add_row(
                *(
                    Text(" " + (text[name].rjust(width) if right else text[name][:width]))
                    for name, _, width, right in columns
                ),
                key=key,
            )
        self._rows = rows
        if rows:
            table.move_cursor(row=min(keep, len(rows) - 1))

    def _head(self) -> str:
        snapshot = self.snapshot
        if snapshot is None:
            return f"job {self.client.job.pid}: {self.problem or 'waiting for an answer'}"
        job = snapshot["job"]
        up = int(time.time() - job["started"])
        program = job["program"]
        lines = [
            f"job {job['pid']}  up {up // 3600}:{up // 60 % 60:02d}:{up % 60:02d}  {program[:50]}"
        ]
        meshes = snapshot["meshes"]
        if self.services:
            return "\n".join([*lines, *self._service_heads(snapshot), self._status()])
        for mesh in meshes[:3]:
            dims = ", ".join(f"{k}={v}" for k, v in zip(mesh["labels"], mesh["sizes"]))
            hosts = ", ".join(mesh["hosts"])
            lines.append(f"{mesh['name']}: {mesh['class']} {{{dims}}} on {hosts}"[:79])
        if len(meshes) > 3:
            lines.append(f"... and {len(meshes) - 3} more meshes (m: next mesh)")
        if not meshes:
            lines.append("no mesh running")
        lines.append(self._status())
        return "\n".join(lines)

    def _service_heads(self, snapshot: dict[str, Any]) -> list[str]:
        services = snapshot.get("services", [])
        lines = []
        for service in services[:3]:
            dims = ", ".join(f"{k}={v}" for k, v in service["per_replica"].items())
            refit = " (refit: paused)" if service["paused"] else ""
            lines.append(
                f"{service['name']}: {service['class']} {len(service['replicas'])} x "
                f"{{{dims}}} version {service['version']}{refit}, {service['pending']} "
                f"waiting, {service['sessions']} sessions"[:79]
            )
        if len(services) > 3:
            lines.append(f"... and {len(services) - 3} more services")
        if not services:
            lines.append("no service running (v: ranks)")
        return lines

    def _status(self) -> str:
        if self.services:
            status = ["view: services"]
        else:
            status = [f"sort: {self.sort}{' (reversed)' if self.reverse else ''}"]
            status.append(f"mesh: {self.filter or 'all'}")
        if self.paused:
            status.append("PAUSED (p resumes)")
        if self.problem:
            status.append(f"! {self.problem}"[:60])
        return "  ".join(status)

    # -- keys ----------------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self._draw()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._draw()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._draw()

    def action_next_mesh(self) -> None:
        names = sorted({mesh["name"] for mesh in (self.snapshot or {}).get("meshes", [])})
        if not names:
            return
        if self.filter in names and names.index(self.filter) + 1 < len(names):
            self.filter = names[names.index(self.filter) + 1]
        elif self.filter in names:
            self.filter = ""
        else:
            self.filter = names[0]
        self._draw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.value = self.filter
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("shown")
        self.filter = ""
        self.query_one(DataTable).focus()
        self._draw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter = event.value.strip()
        event.input.remove_class("shown")
        self.query_one(DataTable).focus()
        self._draw()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_details()

    def action_view(self) -> None:
        self.services = not self.services
        self._draw()

    def action_details(self) -> None:
        table = self.query_one(DataTable)
        if not 0 <= table.cursor_row < len(self._rows):
            return
        owner, row = self._rows[table.cursor_row]
        if self.services:  # the replica's ranks: its process mesh is <service>.<replica>
            self.filter = str(row["mesh"])
            self.services = False
            self._draw()
            return
        self.push_screen(RankScreen(rank_details(owner, row)))


def top(args: argparse.Namespace) -> int:
    """Run ``actormesh top`` until the user quits."""
    job = find_job(args.job)
    with JobClient(job, timeout=10.0) as client:
        client.request("info")  # fail here, before the screen is taken over
        TopApp(client, args.mesh, max(0.2, args.interval), args.services).run(mouse=False)
    return 0
