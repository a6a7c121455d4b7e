"""A stage's first update, measured: per optimiser group, the share of its elements that moved.

An update that rounds away (a bf16 weight stepped by less than half its spacing, a learning rate lost
under a large weight) leaves the loss on a plateau that looks like a hard task. The first step that
updates anything at the stage's full learning rate (after a warm-up, whose first rates may rightly move
nothing) is therefore measured against the weights the stage began with; a group of which fewer than half
of the elements its gradient reached moved fails the stage (``UpdatesVanished``, the stop gate
``STAGE:updates_move``), never a silent plateau. The shares are kept for the dry run to report.
"""

from __future__ import annotations

from typing import Any

import torch

from arms.train.step import TrainingDiverged

# Adam's first step moves every element whose gradient is not zero by about the learning rate; where fewer
# than half of them move, most updates are rounding away.
MIN_MOVED = 0.5


class UpdatesVanished(TrainingDiverged):
    """The first update moved no element of a group its gradient reached."""

    gate = "updates_move"


class FirstUpdate:
    def __init__(self, optimizer: Any):
        self.optimizer = optimizer
        stepped = optimizer.stepped()
        self.before: dict[str, list[torch.Tensor]] | None = {
            name: [tensor.detach().clone() for tensor in tensors] for name, tensors in stepped.items()
        }
        self.shares: dict[str, float] | None = None  # per group, once the first update is measured

    def after_step(self, updated: bool, where: str = "") -> None:
        """Measure the first step that updated at the full rate (once a stage: one copy to the host)."""
        if self.before is None or not updated or self.optimizer.lr_scale < 1.0:
            return
        shares: dict[str, float] = {}
        vanished = []
        for name, tensors in self.optimizer.stepped().items():
            reached = torch.zeros((), dtype=torch.int64, device=tensors[0].device)
            moved = torch.zeros((), dtype=torch.int64, device=tensors[0].device)
            for tensor, before in zip(tensors, self.before[name]):
                if tensor.grad is None:
                    continue
                touched = tensor.grad.ne(0)
                reached += touched.sum()
                moved += (touched & tensor.detach().ne(before)).sum()
            if int(reached) == 0:
                continue  # nothing reached this group yet (an adapter's depth-1 rows): nothing to say of it
            shares[name] = int(moved) / int(reached)
            if shares[name] < MIN_MOVED:
                vanished.append(f"{name} ({100 * shares[name]:.1f}%)")
        self.before, self.shares = None, shares
        if vanished:
            raise UpdatesVanished(
                f"{where}the first update at the full rate moved under {MIN_MOVED:.0%} of the elements its gradient "
                f"reached in {', '.join(vanished)}: updates below the weights' rounding step (a learning rate too "
                "small for the dtype?)"
            )

    def summary(self) -> str:
        """What the first update moved, per group: the share of the elements its gradient reached."""
        if self.shares is None:
            return "no step at the full rate updated anything"
        least = min(self.shares, key=self.shares.__getitem__)
        return (
            f"the first update moved {100 * min(self.shares.values()):.1f}%-{100 * max(self.shares.values()):.1f}% "
            f"of the elements its gradient reached, per group (least: {least})"
        )
