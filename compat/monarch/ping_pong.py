"""Conformance program modelled on Monarch's docs example ``ping_pong.py``.

Two parts, both checked by value rather than by eye:

1. Echo: four ``Beacon`` actors in one process mesh (``this_host().spawn_procs`` with a
   ``per_host`` extent) answer a ``call`` to the whole mesh, which gives a ``ValueMesh``
   in rank order, and then a ``call_one`` sent to each of them through ``slice``.
2. Rally: two meshes of two ``Player`` actors each, spawned with an extra constructor
   argument (the team name). Each team is handed the other team's mesh as an endpoint
   argument, and every player keeps the opponent at its own coordinates
   (``opponents.slice(**current_rank())``). A ``serve`` endpoint (synchronous) blocks
   on ``.get()`` of a call it makes to that opponent, so each serve must arrive at
   exactly one player of the other team, the one with the same rank.
"""

from __future__ import annotations

from monarch.actor import Actor, current_rank, endpoint, this_host

BEACONS = 4
PAIRS = 2


class Beacon(Actor):
    """Answers with its own rank and a value derived from the message."""

    def __init__(self):
        self.my_rank = current_rank().rank

    @endpoint
    def flash(self, token: str) -> tuple[int, str]:
        reply = f"{token.upper()}#{self.my_rank}"
        print(f"beacon {self.my_rank} got {token!r}, replies {reply!r}")
        return self.my_rank, reply


lighthouse = this_host().spawn_procs(per_host={"lamp": BEACONS})
beacons = lighthouse.spawn("beacon", Beacon)

everyone = beacons.flash.call("all hands").get()
expected_all = [(r, f"ALL HANDS#{r}") for r in range(BEACONS)]
assert everyone.values() == expected_all, everyone
print("one call to the mesh ->", everyone.values())

pending = {lamp: beacons.slice(lamp=lamp).flash.call_one(f"only {lamp}") for lamp in range(BEACONS)}
singles = {lamp: fut.get() for lamp, fut in pending.items()}
# The rank was read in __init__ (the actor's place in the whole mesh): each slice of one
# actor must have reached the beacon at that place.
for lamp, answer in singles.items():
    assert answer == (lamp, f"ONLY {lamp}#{lamp}"), (lamp, answer)
print("call_one on each slice ->", singles)


class Player(Actor):
    """One side of a rally; learns its opponent mesh later, through ``meet``."""

    def __init__(self, team: str):
        self.team = team
        self.seat = current_rank().rank
        self.log: list[str] = []
        self.partner = None

    @endpoint
    def meet(self, opponents) -> None:
        # Keep only the opponent facing this player: same coordinates, other mesh.
        self.partner = opponents.slice(**current_rank())

    @endpoint
    def serve(self, shot: str) -> None:
        # A blocking wait on another actor, from inside a synchronous endpoint.
        self.partner.hit.call(f"{shot} from {self.team}/{self.seat}").get()

    @endpoint
    def hit(self, ball: str) -> None:
        print(f"{self.team}/{self.seat} returned: {ball}")
        self.log.append(ball)

    @endpoint
    def history(self) -> list[str]:
        return list(self.log)


west = this_host().spawn_procs(per_host={"lamp": PAIRS}).spawn("west", Player, "west")
east = this_host().spawn_procs(per_host={"lamp": PAIRS}).spawn("east", Player, "east")

west.meet.call(east).get()
east.meet.call(west).get()

west.serve.call("topspin").get()
east.serve.call("slice").get()

west_log = west.history.call().get()
east_log = east.history.call().get()
for seat in range(PAIRS):
    assert east_log.item(lamp=seat) == [f"topspin from west/{seat}"], east_log
    assert west_log.item(lamp=seat) == [f"slice from east/{seat}"], west_log
print("rally OK:", west_log.values(), east_log.values())
