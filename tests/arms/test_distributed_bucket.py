"""Gradients averaged over the ranks in one bucket (`arms/train/distributed.py`), on two CPU processes over
gloo: one collective a step whatever the tensor count, the average exact, a tensor no rank reached left
without a gradient, one only one rank reached averaged with zeros; and the backend follows the device."""

from __future__ import annotations

import os
import socket
import tempfile

import pytest
import torch
import torch.multiprocessing as mp

from arms.train.distributed import World, backend_for

pytestmark = pytest.mark.models


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    calls = []
    all_reduce = torch.distributed.all_reduce

    def counted(tensor, *args, **kwargs):
        calls.append(tensor.numel())
        return all_reduce(tensor, *args, **kwargs)

    torch.distributed.all_reduce = counted
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in ((3, 4), (5,), (2, 2), (7,))]
    params.append(torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16)))
    for i, p in enumerate(params):
        if i == 2 or (i == 3 and rank == 1):
            continue  # tensor 2 reached by no rank, tensor 3 by rank 0 alone
        p.grad = torch.full_like(p, float(rank + 1 + i))
    World(rank, 2, rank).average_gradients(params)
    torch.save(
        {"calls": calls, "grads": [None if p.grad is None else p.grad.float() for p in params]},
        os.path.join(folder, f"rank{rank}.pt"),
    )
    torch.distributed.destroy_process_group()


def test_two_gloo_ranks_average_every_gradient_in_one_collective():
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_rank, args=(_free_port(), folder), nprocs=2, join=True)
        results = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(2)]
    for result in results:
        assert len(result["calls"]) == 1  # one bucket: the flags and every gradient
        assert result["calls"][0] == 5 + 12 + 5 + 4 + 7 + 3
        grads = result["grads"]
        for i in (0, 1, 4):  # reached on both ranks: the mean of (1 + i) and (2 + i)
            assert torch.equal(grads[i], torch.full_like(grads[i], 1.5 + i))
        assert grads[2] is None  # no rank reached it: the optimiser skips it, as in one process
        assert torch.equal(grads[3], torch.full_like(grads[3], (1 + 3) / 2))  # rank 0's, averaged with zeros
    assert all(torch.equal(a, b) for a, b in zip(results[0]["grads"][:2], results[1]["grads"][:2]))


def test_the_backend_follows_the_device():
    assert backend_for("auto", cuda_available=True) == "nccl"
    assert backend_for("cuda", cuda_available=True) == "nccl"
    assert backend_for("cpu", cuda_available=True) == "gloo"  # was NCCL whenever CUDA existed
    assert backend_for("cuda:1", cuda_available=True) == "gloo"  # one named GPU, shared by every rank
    assert backend_for("auto", cuda_available=False) == "gloo"
