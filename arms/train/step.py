"""The one training step every path takes: zero the gradients, compute the loss, refuse a
non-finite one, back-propagate, clip the global gradient norm, update.

``ArmRuntime.train_stage`` (what `ledger run` trains with) calls it for every step, and
so do the tests of learning dynamics and the update audit: there is no second step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from arms.train.distributed import SINGLE, World

GRAD_CLIP = 1.0  # global gradient-norm clip of every stage


class TrainingDiverged(RuntimeError):
    """The loss stopped being finite: the stage failed (its checkpoint fails the stop gate ``STAGE:gate``)."""

    gate = "finite_loss"


@dataclass(frozen=True)
class Step:
    loss: float
    grad_norm: float | None  # before clipping; None when nothing was updated
    updated: bool


def take_step(
    optimizer: Any,
    loss_fn: Callable[[], torch.Tensor],
    params: Iterable[torch.nn.Parameter],
    *,
    grad_clip: float = GRAD_CLIP,
    where: str = "",
    world: World = SINGLE,
) -> Step:
    """One optimiser step on ``loss_fn()``.

    A loss that reaches no trainable tensor (an adapter arm's depth-1 rows: loop 1 runs without the adapter
    or the bridge) has every gradient zero: the weights stay as they are and ``updated`` is False.
    """
    optimizer.zero_grad()
    loss = loss_fn()
    # data-parallel: every rank sees the same mean loss and the same decision (arms/train/distributed.py)
    value = world.mean(float(loss.detach()))
    if not math.isfinite(value):
        raise TrainingDiverged(f"{where}loss is {value}")
    if not world.any(loss.requires_grad):
        return Step(value, None, False)
    params = list(params)
    if loss.requires_grad:
        loss.backward()
    world.average_gradients(params)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(list(params), grad_clip))
    optimizer.step()
    return Step(value, grad_norm, True)
