"""The actor parts of Monarch's docs example ``getting_started.py``: actors, meshes, ranks.

- an actor in this very process (``this_proc().spawn``, keyword arguments to
  ``__init__``) and a ``Future`` from ``call_one``;
- a mesh of processes (``this_host().spawn_procs``), ``broadcast`` to all of it and to a
  slice, then ``call`` and the printed ``ValueMesh``;
- a two-dimensional mesh (the example's ``hosts`` x ``gpus``, here from ``per_host``
  because ``hosts_from_config`` is not in ``monarch.actor`` 0.7) and
  ``context().message_rank``;
- actor references: data loaders passed to the trainers' constructor, each trainer
  keeping the loader at its own coordinates (``context().actor_instance.rank``);
- the actor's rank against the message's rank, on the whole mesh and on a slice.
"""

from __future__ import annotations

from monarch.actor import Actor, Future, ProcMesh, context, endpoint, this_host, this_proc


class Counter(Actor):
    def __init__(self, initial_value: int):
        self.value = initial_value

    @endpoint
    def increment(self) -> None:
        self.value += 1

    @endpoint
    def get_value(self) -> int:
        return self.value


counter: Counter = this_proc().spawn("counter", Counter, initial_value=0)
fut: Future[int] = counter.get_value.call_one()
value: int = fut.get()
print(f"Counter value: {value}")
assert value == 0

procs: ProcMesh = this_host().spawn_procs(per_host={"gpus": 4})
counters: Counter = procs.spawn("counters", Counter, 0)
counters.increment.broadcast()
counters.slice(gpus=slice(0, 2)).increment.broadcast()
values = counters.get_value.call().get()
print(values)
assert values.values() == [2, 2, 1, 1], values
assert dict(values.extent) == {"gpus": 4}
assert "ValueMesh" in repr(values)


class Trainer(Actor):
    @endpoint
    def step(self):
        my_point = context().message_rank
        return f"Trainer {dict(my_point)} taking a step."


trainer_procs: ProcMesh = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
print(f"Process mesh extent: {trainer_procs.extent}")
assert dict(trainer_procs.extent) == {"hosts": 2, "gpus": 2}
trainers = trainer_procs.spawn("trainer", Trainer)
steps = trainers.step.call().get()
print(steps)
for point, text in steps.items():
    assert text == f"Trainer {dict(point)} taking a step.", (point, text)


class DataLoader(Actor):
    def __init__(self):
        self.i = 0

    @endpoint
    def example(self):
        self.i += 1
        return f"<fake data {self.i} from {dict(context().actor_instance.rank)}>"


class DataTrainer(Actor):
    def __init__(self, dataloader: DataLoader):
        my_rank = context().actor_instance.rank
        self.dataloader = dataloader.slice(**my_rank)

    @endpoint
    def step(self, input=None):
        data = self.dataloader.example.call_one().get()
        return f"Step with data {data} and input = {input}"


dataloaders = trainer_procs.spawn("dataloader", DataLoader)
dtrainers = trainer_procs.spawn("dtrainers", DataTrainer, dataloaders)
first = dtrainers.step.call().get()
second = dtrainers.step.call(input=7).get()
print(second)
for point, text in first.items():
    assert text == f"Step with data <fake data 1 from {dict(point)}> and input = None", text
for point, text in second.items():
    assert text == f"Step with data <fake data 2 from {dict(point)}> and input = 7", text


class ContextAwareActor(Actor):
    @endpoint
    def get_context_info(self):
        actor_instance = context().actor_instance
        message_rank = context().message_rank
        return dict(actor_instance.rank), dict(message_rank), message_rank.rank


c = trainer_procs.spawn("context_actor", ContextAwareActor)
info = c.get_context_info.call().get()
print(info)
for point, (actor_rank, message_rank, flat) in info.items():
    assert actor_rank == message_rank == dict(point)
    assert flat == point.rank
# Sent to a slice, the message's rank is relative to the slice; the actor's is not.
sliced = c.slice(hosts=1).get_context_info.call().get()
print(sliced)
assert dict(sliced.extent) == {"gpus": 2}
for point, (actor_rank, message_rank, flat) in sliced.items():
    assert actor_rank == {"hosts": 1, "gpus": point["gpus"]}
    assert message_rank == {"gpus": point["gpus"]} and flat == point["gpus"]
print("getting started: actors OK")
