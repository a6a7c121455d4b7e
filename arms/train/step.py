"""The one training step every path takes: zero the gradients, compute the loss, back-propagate, clip the
global gradient norm, update; and the stage's losses, brought to the host in batches.

``ArmRuntime.train_stage`` (what `ledger run` trains with) calls it for every step, and
so do the tests of learning dynamics and the update audit: there is no second step.

Nothing in a step waits for the device: the loss and the gradient norm stay device tensors (clipping
scales by a device-side coefficient). ``StageLosses`` copies a stage's losses to the host every
``LOSS_COPY_EVERY`` steps, before a checkpoint and at the stage's end, in one copy; a non-finite loss
fails the stage there, naming its step (``TrainingDiverged``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from arms.train.distributed import SINGLE, World

GRAD_CLIP = 1.0  # global gradient-norm clip: a stage's optimizer.grad_clip, where it says none
LOSS_COPY_EVERY = 10  # steps between copies of the losses to the host (each one waits for the device)


class TrainingDiverged(RuntimeError):
    """The loss stopped being finite: the stage failed (its checkpoint fails the stop gate ``STAGE:gate``)."""

    gate = "finite_loss"


@dataclass(frozen=True)
class Step:
    loss: torch.Tensor  # the ranks' mean loss, detached, on the device
    grad_norm: torch.Tensor | None  # before clipping, on the device; None when nothing was updated
    updated: bool


def take_step(
    optimizer: Any,
    loss_fn: Callable[[], torch.Tensor] | Sequence[Callable[[], torch.Tensor]],
    params: Iterable[torch.nn.Parameter],
    *,
    grad_clip: float = GRAD_CLIP,
    world: World = SINGLE,
) -> Step:
    """One optimiser step on ``loss_fn()``, or on the mean of a step's micro-batch losses (gradient
    accumulation: each is back-propagated at weight 1/k before the next is computed, so one graph is held).

    A loss that reaches no trainable tensor (an adapter arm's depth-1 rows: loop 1 runs without the adapter
    or the bridge) has every gradient zero: the weights stay as they are and ``updated`` is False.
    """
    optimizer.zero_grad()
    parts = list(loss_fn) if isinstance(loss_fn, Sequence) else [loss_fn]
    total, reaches = None, False
    for part in parts:
        loss = part() if len(parts) == 1 else part() / len(parts)
        if loss.requires_grad:
            loss.backward()
            reaches = True
        total = loss.detach() if total is None else total + loss.detach()
    assert total is not None
    # data-parallel: every rank sees the same mean loss and the same decision (arms/train/distributed.py)
    value = world.average(total)
    if not world.any(reaches):
        return Step(value, None, False)
    params = list(params)
    world.average_gradients(params)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    # autocast keeps its bf16 copy of a trained weight until its outermost context exits, and `ledger run` holds
    # one context over a whole arm: without this, every later forward would read the weights of the first step
    torch.clear_autocast_cache()
    return Step(value, grad_norm.detach(), True)


class StageLosses:
    """A stage's step losses, held on the device and handed to ``progress(step, loss)`` in batches."""

    def __init__(self, progress: Callable[[int, float], None] | None, where: str, every: int = LOSS_COPY_EVERY):
        self.progress, self.where, self.every = progress, where, every
        self.pending: list[tuple[int, torch.Tensor]] = []
        self.last = math.nan

    def add(self, step: int, loss: torch.Tensor) -> None:
        self.pending.append((step, loss))
        if len(self.pending) >= self.every:
            self.flush()

    def flush(self) -> float:
        """Copy the pending losses to the host (one copy); raise at the first non-finite one."""
        if self.pending:
            values = torch.stack([loss.double() for _, loss in self.pending]).tolist()
            steps = [step for step, _ in self.pending]
            self.pending = []
            for step, value in zip(steps, values):
                if not math.isfinite(value):
                    raise TrainingDiverged(f"{self.where}step {step}: loss is {value}")
                self.last = value
                if self.progress is not None:
                    self.progress(step, value)
        return self.last
