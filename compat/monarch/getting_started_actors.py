"""Conformance program for the actor sections of Monarch's docs example
``getting_started.py`` (actors, meshes, ranks); the toy actors here are its own.

- one actor in this very process (``this_proc().spawn``, a keyword argument for
  ``__init__``), queried through a typed ``Future`` from ``call_one``;
- a process mesh from ``this_host().spawn_procs``: ``broadcast`` to all of it and to a
  ``slice`` of it, then ``call`` and the ``ValueMesh`` it returns (values, extent, repr);
- a two-dimensional mesh (the docs build it from ``hosts_from_config``, which
  ``monarch.actor`` 0.7 does not have, so here both dimensions come from ``per_host``)
  and ``context().message_rank``;
- a mesh handed to another mesh's constructor: each ``Reader`` keeps the ``Shelf`` at
  its own coordinates, found with ``context().actor_instance.rank``;
- the actor's own rank against the rank its message carries, on the whole mesh and on a
  slice of it.
"""

from __future__ import annotations

from monarch.actor import Actor, Future, ProcMesh, context, endpoint, this_host, this_proc


class Odometer(Actor):
    def __init__(self, start: int):
        self.km = start

    @endpoint
    def drive(self) -> None:
        self.km += 10

    @endpoint
    def reading(self) -> int:
        return self.km


local: Odometer = this_proc().spawn("odometer", Odometer, start=120)
pending: Future[int] = local.reading.call_one()
km: int = pending.get()
print("local odometer reads", km)
assert km == 120

fleet_procs: ProcMesh = this_host().spawn_procs(per_host={"car": 4})
fleet: Odometer = fleet_procs.spawn("fleet", Odometer, 5)
fleet.drive.broadcast()
fleet.slice(car=slice(1, 3)).drive.broadcast()
readings = fleet.reading.call().get()
print(readings)
assert readings.values() == [15, 25, 25, 15], readings
assert dict(readings.extent) == {"car": 4}
assert "ValueMesh" in repr(readings)


class Surveyor(Actor):
    @endpoint
    def locate(self) -> dict:
        return dict(context().message_rank)


grid: ProcMesh = this_host().spawn_procs(per_host={"row": 2, "col": 3})
print("grid extent:", grid.extent)
assert dict(grid.extent) == {"row": 2, "col": 3}
surveyors = grid.spawn("surveyor", Surveyor)
spots = surveyors.locate.call().get()
for point, spot in spots.items():
    assert spot == dict(point), (point, spot)
order = [(s["row"], s["col"]) for s in spots.values()]
assert order == [(r, c) for r in range(2) for c in range(3)], order


class Shelf(Actor):
    def __init__(self):
        self.handed_out = 0

    @endpoint
    def fetch(self) -> str:
        self.handed_out += 1
        where = dict(context().actor_instance.rank)
        return f"volume {self.handed_out} of shelf {where['row']}.{where['col']}"


class Reader(Actor):
    def __init__(self, shelves: Shelf):
        here = context().actor_instance.rank
        self.shelf = shelves.slice(**here)  # the one shelf facing this reader

    @endpoint
    def read(self, note: str = "-") -> str:
        book = self.shelf.fetch.call_one().get()
        return f"{book} ({note})"


shelves = grid.spawn("shelf", Shelf)
readers = grid.spawn("reader", Reader, shelves)
once = readers.read.call().get()
twice = readers.read.call(note="again").get()
print(twice)
for point, text in once.items():
    assert text == f"volume 1 of shelf {point['row']}.{point['col']} (-)", text
for point, text in twice.items():
    assert text == f"volume 2 of shelf {point['row']}.{point['col']} (again)", text


class WhereAmI(Actor):
    @endpoint
    def both_ranks(self) -> tuple[dict, dict, int]:
        ctx = context()
        return dict(ctx.actor_instance.rank), dict(ctx.message_rank), ctx.message_rank.rank


probe = grid.spawn("probe", WhereAmI)
whole = probe.both_ranks.call().get()
for point, (own, carried, flat) in whole.items():
    assert own == carried == dict(point) and flat == point.rank, (point, own, carried)
# Sent to a slice, the message's rank counts within the slice; the actor's own does not.
second_row = probe.slice(row=1).both_ranks.call().get()
print(second_row)
assert dict(second_row.extent) == {"col": 3}
for point, (own, carried, flat) in second_row.items():
    assert own == {"row": 1, "col": point["col"]}, own
    assert carried == {"col": point["col"]} and flat == point["col"], carried
print("getting started: actors OK")
