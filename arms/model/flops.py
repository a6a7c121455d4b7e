"""Training FLOPs by design M's rule, from the real module shapes of an arm.

Fixed depth: ``6 N D``. Recurrent: ``(6 N1 + 2 N2) D`` with ``N1`` the parameters applied
while gradients are recorded (prelude, coda, final norm, and the adapter and block at each
of the last ``min(s, r)`` iterations) and ``N2`` those applied forward-only (the adapter and
block at the first ``max(r - s, 0)`` iterations). Parameters are counted uniquely per
application and embeddings (input table and lm_head) are excluded. ``D`` is the number of
tokens the step's loss reads.

The counts are taken at the *realised* recurrence of every step (the sampler's draw), so a
stage's FLOPs are a sum over its steps, not a formula at the nominal mean: the published
sampler's mean is ``k + 1``, not ``k`` (``arms.train.recurrence``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from arms.model.accounting import count_parameters


@dataclass(frozen=True)
class RecurrentCounts:
    """Non-embedding parameters of each part of a retrofitted model (unique)."""

    once: int  # prelude + coda + final norm: applied once per forward
    per_iteration: int  # block (+ adapter, + block norms): applied once per iteration

    def flops_per_token(self, recurrences: int, backprop_depth: int) -> float:
        """``6 N1 + 2 N2`` for one step at ``recurrences`` iterations, the last ``backprop_depth`` with gradient."""
        # truncated backprop (arms.train.recurrence.split_no_grad): the last min(s, r) iterations record gradients
        no_grad, grad = max(recurrences - backprop_depth, 0), min(recurrences, backprop_depth)
        n1 = self.once + grad * self.per_iteration
        n2 = no_grad * self.per_iteration
        return 6.0 * n1 + 2.0 * n2


def recurrent_counts(surgery: Any, bridge: nn.Module | None, block_extra: nn.Module | None = None) -> RecurrentCounts:
    """The counts of a cut model: ``surgery`` (``arms.model.surgery.CutModel``), its bridge or adapter, and any
    module applied with the block at every iteration (``block_extra``: design M's block norms)."""
    once = count_parameters([*surgery.prelude, *surgery.coda, surgery.norm], exclude_embeddings=True)
    per_iteration = count_parameters([*surgery.block, bridge, block_extra], exclude_embeddings=True)
    return RecurrentCounts(once=once, per_iteration=per_iteration)


def fixed_depth_flops_per_token(model: nn.Module) -> float:
    """``6 N`` of a fixed-depth model: every non-embedding parameter, forward and backward."""
    return 6.0 * count_parameters(model, exclude_embeddings=True)
