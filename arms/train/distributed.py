"""Data-parallel training across processes with ``torch.distributed`` (launched by ``torchrun``).

``torchrun --nproc-per-node N -m ledger run P --arms A`` starts N copies of the run; each
learns its rank from the environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``). Then:

* every rank draws the *same* seeded batch of a step (the draw hashes seed, arm, stage and
  step: no rank talks to another to agree on it) and trains on its slice ``batch[rank::N]``;
* after the backward pass the gradients are averaged over the ranks (``all_reduce``, the
  arithmetic ``DistributedDataParallel`` performs; the wrapper itself is not used because
  the looped block is called through the runtime's loss functions, not one ``forward``),
  then every rank clips and steps identically, so the weights stay equal on every rank;
* the loss of a step is the mean of the ranks' losses; a non-finite one stops every rank;
* only rank 0 opens the ledger: it registers, records, gates and evaluates; it tells the
  other ranks what to do next (train a stage, load a checkpoint, finish) by broadcast.

gloo on the CPU, NCCL on GPUs (rank r uses ``cuda:LOCAL_RANK``); the gradients travel in one bucket a step. Averaging the ranks'
mean losses weights each slice equally, where one process weights each supervised cell:
the loss curve matches a single-process run closely, not bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

# Rank 0 evaluates and gates between stages while the others wait: a generous timeout.
WAIT = timedelta(hours=6)


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.size > 1

    def shard(self, batch: Sequence[Any]) -> list[Any]:
        """This rank's slice of a step's batch (the whole batch in one process)."""
        return list(batch[self.rank :: self.size]) if self.parallel else list(batch)

    def mean(self, value: float) -> float:
        if not self.parallel:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=_comm_device())
        torch.distributed.all_reduce(tensor)
        return float(tensor.item()) / self.size

    def average(self, value: torch.Tensor) -> torch.Tensor:
        """The ranks' mean of a device scalar, as a device tensor (float64 across ranks): nothing waits."""
        if not self.parallel:
            return value
        total = value.detach().to(torch.float64).reshape(1).clone()
        torch.distributed.all_reduce(total)
        return total[0] / self.size

    def any(self, flag: bool) -> bool:
        if not self.parallel:
            return flag
        tensor = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_comm_device())
        torch.distributed.all_reduce(tensor)
        return bool(tensor.item())

    def average_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Average every gradient over the ranks in one collective: the tensors' gradients flattened into one
        fp32 bucket, headed by a flag per tensor (was it reached on this rank), as DDP's reducer buckets them.

        A tensor no rank reached keeps ``grad None`` (the optimiser skips it, as in one process); one only
        some ranks reached counts zeros elsewhere. bf16 gradients are summed in fp32 and written back."""
        if not self.parallel:
            return
        params = list(params)
        if not params:
            return
        device = params[0].device
        flags = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
        bucket = torch.cat(
            [flags]
            + [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(torch.float32) for p in params]
        )
        torch.distributed.all_reduce(bucket)
        counts = bucket[: len(params)].tolist()  # one copy to the host, after the collective
        offset = len(params)
        for parameter, count in zip(params, counts):
            n = parameter.numel()
            if count:
                averaged = (bucket[offset : offset + n] / self.size).view_as(parameter)
                if parameter.grad is None:
                    parameter.grad = torch.empty_like(parameter)
                parameter.grad.copy_(averaged)
            offset += n

    def tell(self, message: Any) -> Any:
        """Rank 0 sends ``message`` to every rank; every rank returns it."""
        if not self.parallel:
            return message
        box = [message if self.is_main else None]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def hear(self) -> Any:
        return self.tell(None)


SINGLE = World()


def world_from_env(device_choice: str = "auto") -> World:
    """The process's place in a ``torchrun`` launch (a one-rank world otherwise); joins the group, over the
    backend the device calls for (``backend_for``)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return SINGLE
    world = World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    if not torch.distributed.is_initialized():
        backend = backend_for(device_choice, torch.cuda.is_available())
        if backend == "nccl":
            torch.cuda.set_device(world.local_rank)
        torch.distributed.init_process_group(backend=backend, timeout=WAIT)
    return world


def backend_for(device_choice: str, cuda_available: bool) -> str:
    """NCCL where every rank trains on a GPU of its own (``--device auto`` or ``cuda`` with CUDA present:
    ``cuda:LOCAL_RANK``); gloo otherwise, ``--device cpu`` and a named GPU (``cuda:1``, which every rank
    would share) included."""
    return "nccl" if cuda_available and device_choice in ("auto", "cuda") else "gloo"


def rank_device(world: World, choice: str) -> str:
    """A rank's device: its own GPU (``cuda:LOCAL_RANK``) when the run is on GPUs."""
    if world.parallel and choice in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{world.local_rank}"
    return choice


def leave(world: World) -> None:
    if world.parallel and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _comm_device() -> torch.device:
    backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else "gloo"
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
