"""An RNN whose embedding table and decoder live on a parameter server, over actormesh.rpc.

The model of torch's distributed RNN tutorial (the second program of the RPC seed): the
trainer keeps the LSTM; the parameter server ("ps") keeps the ``EmbeddingTable`` and the
``Decoder``, created there with ``rpc.remote``. Each step runs the forward pass across
both processes inside a distributed autograd context, the backward pass with
``dist_autograd.backward``, and one ``DistributedOptimizer`` step that updates the
parameters where they live.

Only the imports differ from a torch.distributed.rpc program. The task is learnable (the
next token is the current one plus one), so the loss falls.

Run it with ``python examples/rpc_parameter_server_rnn.py [--epochs N]``.
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.multiprocessing as mp
from torch import nn, optim

from actormesh import rpc
from actormesh.rpc import DistributedOptimizer
from actormesh.rpc import autograd as dist_autograd

NTOKEN, NINP, NHID, NLAYERS = 10, 8, 16, 2
SEQ_LEN, BATCH = 6, 4


# -- helpers of the tutorial: call a method of the object behind an RRef, on its owner ------


def _call_method(method, rref, *args, **kwargs):
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    return rpc.rpc_sync(rref.owner(), _call_method, args=[method, rref, *args], kwargs=kwargs)


def _parameter_rrefs(module):
    return [rpc.RRef(param) for param in module.parameters()]


# -- the model ----------------------------------------------------------------------------


class EmbeddingTable(nn.Module):
    """Lives on the parameter server (on its GPU, when there is one)."""

    def __init__(self, ntoken, ninp, dropout):
        super().__init__()
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp).to(self.device)

    def forward(self, input):
        return self.drop(self.encoder(input.to(self.device))).cpu()


class Decoder(nn.Module):
    """Lives on the parameter server."""

    def __init__(self, ntoken, nhid, dropout):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, output):
        return self.decoder(self.drop(output))


class RNNModel(nn.Module):
    """The LSTM is local to the trainer; embedding and decoder are remote."""

    def __init__(self, ps, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.emb_table_rref = rpc.remote(ps, EmbeddingTable, args=(ntoken, ninp, dropout))
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder_rref = rpc.remote(ps, Decoder, args=(ntoken, nhid, dropout))

    def forward(self, input, hidden):
        emb = _remote_method(EmbeddingTable.forward, self.emb_table_rref, input)
        output, hidden = self.rnn(emb, hidden)
        decoded = _remote_method(Decoder.forward, self.decoder_rref, output)
        return decoded, hidden

    def parameter_rrefs(self):
        remote_params = []
        remote_params.extend(_remote_method(_parameter_rrefs, self.emb_table_rref))
        remote_params.extend(_parameter_rrefs(self.rnn))
        remote_params.extend(_remote_method(_parameter_rrefs, self.decoder_rref))
        return remote_params


# -- training -----------------------------------------------------------------------------


def get_batches(generator, count):
    """``count`` batches of a learnable task: predict the next token (current + 1)."""
    for _ in range(count):
        data = torch.randint(0, NTOKEN, (SEQ_LEN, BATCH), generator=generator)
        target = ((data + 1) % NTOKEN).view(-1)
        yield data, target


def init_hidden():
    shape = (NLAYERS, BATCH, NHID)
    return torch.zeros(shape), torch.zeros(shape)


def run_trainer(epochs, batches_per_epoch):
    model = RNNModel("ps", NTOKEN, NINP, NHID, NLAYERS, dropout=0.0)
    opt = DistributedOptimizer(optim.Adam, model.parameter_rrefs(), lr=0.03)
    criterion = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(0)
    for epoch in range(epochs):
        total = 0.0
        for data, target in get_batches(generator, batches_per_epoch):
            with dist_autograd.context() as context_id:
                output, _ = model(data, init_hidden())
                loss = criterion(output.view(-1, NTOKEN), target)
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / batches_per_epoch:.4f}", flush=True)


def run_worker(rank, world_size, port, epochs, batches_per_epoch):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.manual_seed(rank)
    if rank == 1:
        rpc.init_rpc("trainer", rank=rank, world_size=world_size)
        run_trainer(epochs, batches_per_epoch)
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size)
    # Blocks until every worker is here and all work is done.
    rpc.shutdown()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batches", type=int, default=10, help="batches per epoch")
    args = parser.parse_args()
    world_size = 2
    mp.spawn(
        run_worker,
        args=(world_size, free_port(), args.epochs, args.batches),
        nprocs=world_size,
        join=True,
    )


if __name__ == "__main__":
    main()
