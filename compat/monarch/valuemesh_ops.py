"""``ValueMesh``, ``Point`` and ``Extent`` as Monarch 0.7 defines them.

A ``{"x": 2, "y": 2}`` mesh answers with one letter per rank; the resulting ValueMesh is
taken apart every documented way: ``items``/``values``/``get``/``item``, ``len``,
``extent``/``sizes``/``size``, ``slice``/``flatten``/``rename``/``split``; its points and
extent as mappings; ``Point(rank, extent)`` and ``Extent(labels, sizes)`` built by hand;
and the printed form the docs show. Every check runs; the failures are listed at the end.
"""

from __future__ import annotations

import traceback

from monarch.actor import (
    Actor,
    Extent,
    Point,
    ValueMesh,
    context,
    current_rank,
    endpoint,
    this_host,
)

failures = []


def check(name, fn):
    try:
        fn()
        print(f"ok    {name}")
    except Exception:
        failures.append(name)
        print(f"FAIL  {name}\n{traceback.format_exc()}")


class Letter(Actor):
    @endpoint
    def letter(self):
        return "abcd"[current_rank().rank]

    @endpoint
    def where(self):
        return dict(context().actor_instance.rank)


mesh = this_host().spawn_procs(per_host={"x": 2, "y": 2}).spawn("letters", Letter)
vm = mesh.letter.call().get()


def values_and_items():
    assert isinstance(vm, ValueMesh)
    assert vm.values() == ["a", "b", "c", "d"]
    assert len(vm) == 4
    pairs = [(dict(p), v) for p, v in vm.items()]
    assert pairs == [
        ({"x": 0, "y": 0}, "a"),
        ({"x": 0, "y": 1}, "b"),
        ({"x": 1, "y": 0}, "c"),
        ({"x": 1, "y": 1}, "d"),
    ], pairs
    assert [v for _, v in vm] == ["a", "b", "c", "d"]  # iter is items()
    assert [p.rank for p, _ in vm.items()] == [0, 1, 2, 3]
    assert vm.get(2) == "c"
    assert vm.item(x=1, y=1) == "d"


def item_needs_every_dimension():
    try:
        vm.item(x=1)
    except KeyError:
        return
    raise AssertionError("item(x=1) on an {x, y} mesh should raise KeyError")


def shape_questions():
    assert dict(vm.extent) == {"x": 2, "y": 2}
    assert vm.sizes == {"x": 2, "y": 2}
    assert vm.size() == 4
    assert vm.size("y") == 2


def views():
    row = vm.slice(x=1)
    assert dict(row.extent) == {"y": 2} and row.values() == ["c", "d"]
    kept = vm.slice(x=slice(1, 2))
    assert dict(kept.extent) == {"x": 1, "y": 2} and kept.values() == ["c", "d"]
    one = vm.slice(x=0, y=1)
    assert dict(one.extent) == {} and one.values() == ["b"]
    flat = vm.flatten("r")
    assert dict(flat.extent) == {"r": 4} and flat.item(r=3) == "d"
    renamed = vm.rename(x="row", y="col")
    assert dict(renamed.extent) == {"row": 2, "col": 2} and renamed.item(row=0, col=1) == "b"
    split = vm.flatten("r").split(r=("a", "b"), a=2)
    assert dict(split.extent) == {"a": 2, "b": 2} and split.values() == vm.values()


def points():
    point = next(iter(vm.items()))[0]
    last = list(vm.items())[-1][0]
    assert list(last.keys()) == ["x", "y"] and dict(last) == {"x": 1, "y": 1}
    assert last["y"] == 1 and last.rank == 3 and len(last) == 2
    assert dict(last.extent) == {"x": 2, "y": 2} and last.size("x") == 2
    assert dict(point) == {"x": 0, "y": 0}
    # A Point as slice kwargs; the actor's own rank is absolute, the message's relative.
    assert mesh.slice(**last).where.call_one().get() == {"x": 1, "y": 1}
    assert mesh.slice(**last).letter.call_one().get() == "a"


def point_missing_label_raises_value_error():
    last = list(vm.items())[-1][0]
    try:
        last["zzz"]
    except ValueError as e:
        assert "zzz" in str(e)
        return
    raise AssertionError("Point['zzz'] should raise ValueError (Monarch 0.7)")


def extent_by_hand():
    e = Extent(["hosts", "gpus"], [2, 3])
    assert e.labels == ["hosts", "gpus"] and e.sizes == [2, 3] and e.nelements == 6
    assert dict(e) == {"hosts": 2, "gpus": 3} and e["gpus"] == 3 and len(e) == 2
    assert repr(e) == "{hosts: 2, gpus: 3}" and str(e) == repr(e)
    assert e == Extent(["hosts", "gpus"], [2, 3])


def point_by_hand():
    e = Extent(["hosts", "gpus"], [2, 3])
    p = Point(4, e)
    assert dict(p) == {"hosts": 1, "gpus": 1} and p.rank == 4 and p.extent == e
    assert repr(p) == "{'hosts': 1/2, 'gpus': 1/3}"


def printed_form():
    expected = (
        "ValueMesh({x: 2, y: 2}):\n"
        "  (({'x': 0/2, 'y': 0/2}, 'a'),\n"
        "   ({'x': 0/2, 'y': 1/2}, 'b'),\n"
        "   ({'x': 1/2, 'y': 0/2}, 'c'),\n"
        "   ({'x': 1/2, 'y': 1/2}, 'd'))"
    )
    print(vm)
    assert str(vm) == expected, f"{vm!s}\n!=\n{expected}"


def printed_values_are_whole():
    long = mesh.letter.call().get()
    text = str(long.slice(x=0))
    assert "'a'" in text and "'b'" in text, text
    words = this_host().spawn_procs(per_host={"w": 2}).spawn("words", Words).say.call().get()
    for value in words.values():
        assert repr(value) in str(words), f"{value!r} not printed whole in:\n{words}"


class Words(Actor):
    @endpoint
    def say(self):
        return f"a rather long answer from rank {current_rank().rank}, printed in full"


for name, fn in list(globals().items()):
    is_check = callable(fn) and getattr(fn, "__module__", None) == __name__
    if is_check and name[0].islower() and name != "check":
        check(name, fn)

print(f"{len(failures)} check(s) failed: {failures}" if failures else "all ValueMesh checks OK")
raise SystemExit(1 if failures else 0)
