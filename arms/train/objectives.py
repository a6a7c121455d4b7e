"""Training losses, model-agnostic (the recurrence schedules are in ``arms.train.recurrence``).

Everything here operates on a per-loop readout tensor ``per_loop_logits`` of shape
``[loops, batch, n_classes]`` (``n_classes`` = the answer-symbol vocabulary or the full
LM vocabulary) plus integer targets, so it serves design S (forced depth, split bridge)
and design M (sampled recurrence, concat adapter) alike and never reaches inside a model.

Conventions
-----------
- Loops are 1-based in the prose and 0-based in tensors: loop ``t`` is
  ``per_loop_logits[t - 1]``.
- A row of depth ``d`` has the path ``[start, f(start), ..., f^d(start)]``
  (``ledger.rows.tasks.rule_chasing`` / ``Row.path``). Loop ``t`` must hold ``path[t]``, the
  t-th intermediate symbol; loop ``d`` holds the answer ``path[d]``. ``path_targets``
  therefore stores ``path[1:]``: column ``t - 1`` is the target of loop ``t``
  (see :func:`encode_path_targets`). Entries beyond a row's depth are ignored
  (any value, conventionally ``IGNORE_INDEX``).

Losses
------
- :func:`intermediate_loss` - cross-entropy at every loop ``t = 1..depth`` of each
  row against ``path[t]``; loops beyond the row's depth are masked; the mean is taken
  over the active (row, loop) cells (so deeper rows weigh more, one cell per loop).
- :func:`outcome_loss` - cross-entropy only at loop ``t = depth`` against the answer,
  mean over rows.
- Annealing (remove the scaffold): ``anneal_loss = w * intermediate + (1 - w) * outcome``
  with the chain weight ``w = anneal_weight(step, total_steps, ramp_fraction)``, which
  falls linearly from 1 at step 0 to 0 at ``step = ramp_fraction * total_steps`` and
  holds 0 afterwards (outcome-only supervision for the rest of the stage).

Recurrence schedules
--------------------
- :class:`ForcedSchedule` - design S: loops = the depth written in the question
  (a mixed-depth batch runs ``max(depth)`` loops and reads loop ``depth`` per row).
- :class:`PoissonLognormalSampler` - design M's published sampler (see its docstring
  for the ``E[r]`` offset: ``E[r] = max(k, s) + 1``, i.e. ``k + 1`` only when ``k >= s``).
- :func:`split_no_grad` - truncated backprop split ``(max(r - s, 0), min(s, r))``.
- :func:`curriculum_mean` - linear or 1-sqrt rise of the mean recurrence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "anneal_loss",
    "anneal_weight",
    "encode_path_targets",
    "intermediate_loss",
    "outcome_loss",
]

IGNORE_INDEX = -100


# ----------------------------------------------------------------------------- helpers


def _check_logits(per_loop_logits: Tensor) -> tuple[int, int, int]:
    if per_loop_logits.ndim != 3:
        raise ValueError(f"per_loop_logits must be [loops, batch, n_classes], got shape {tuple(per_loop_logits.shape)}")
    return tuple(per_loop_logits.shape)  # type: ignore[return-value]


def _as_long(x: Tensor | Sequence[int], device: torch.device | str, name: str) -> Tensor:
    t = torch.as_tensor(x, device=device)
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"{name} must be integer, got {t.dtype}")
    return t.long()


# Labels (depths, targets, answers) are checked and turned into gather indices on the host, where a check
# costs nothing; only the indices travel to the logits' device. Labels on a device are copied here once.
HOST = "cpu"


def _check_depths(depths: Tensor, loops: int, batch: int) -> None:
    if depths.shape != (batch,):
        raise ValueError(f"depths must have shape [{batch}], got {tuple(depths.shape)}")
    if batch and int(depths.min()) < 1:
        raise ValueError("every depth must be >= 1")
    if batch and int(depths.max()) > loops:
        raise ValueError(
            f"a row has depth {int(depths.max())} but only {loops} loops were run (forced depth needs loops >= depth)"
        )


def _restrict(per_loop_logits: Tensor, restrict_to: Tensor | Sequence[int] | None) -> Tensor:
    """Keep only the vocabulary columns ``restrict_to`` (targets then index into it)."""
    if restrict_to is None:
        return per_loop_logits
    idx = torch.as_tensor(restrict_to, device=per_loop_logits.device, dtype=torch.long)
    return per_loop_logits.index_select(-1, idx)


def encode_path_targets(
    paths: Sequence[Sequence[str]],
    vocab: Sequence[str] | Mapping[str, int],
    n_loops: int | None = None,
    pad: int = IGNORE_INDEX,
) -> tuple[Tensor, Tensor, Tensor]:
    """Encode ``Row.path`` lists (start included) as loss targets.

    Returns ``(path_targets [B, T], answers [B], depths [B])`` with
    ``path_targets[b, t - 1] = index(path[t])`` for ``t = 1..depth`` and ``pad`` beyond;
    ``T = n_loops`` or the largest depth. ``vocab`` maps a symbol to its class index
    (a sequence: position; a mapping: value).
    """
    index = dict(vocab) if isinstance(vocab, Mapping) else {s: i for i, s in enumerate(vocab)}
    depths = [len(p) - 1 for p in paths]
    if any(d < 1 for d in depths):
        raise ValueError("every path needs a start and at least one hop")
    width = n_loops if n_loops is not None else max(depths, default=1)
    if depths and max(depths) > width:
        raise ValueError(f"n_loops={width} is smaller than the largest depth {max(depths)}")
    targets = torch.full((len(paths), width), pad, dtype=torch.long)
    for b, path in enumerate(paths):
        for t in range(1, len(path)):
            targets[b, t - 1] = index[path[t]]
    answers = torch.tensor([index[p[-1]] for p in paths], dtype=torch.long)
    return targets, answers, torch.tensor(depths, dtype=torch.long)


# ----------------------------------------------------------------------------- losses


def intermediate_loss(
    per_loop_logits: Tensor,
    path_targets: Tensor,
    depths: Tensor | Sequence[int],
    *,
    restrict_to: Tensor | Sequence[int] | None = None,
) -> Tensor:
    """Intermediate-state supervision: CE of loop ``t`` against the t-th symbol.

    ``per_loop_logits``: ``[L, B, V]``; ``path_targets``: ``[B, >= max depth]`` with
    column ``t - 1`` the target of loop ``t`` (``path[1:]``, see module docstring);
    ``depths``: ``[B]``. Cell ``(t, b)`` is active iff ``t <= depths[b]``; the loss is
    the mean CE over active cells. Logits of masked cells (and target entries beyond
    a row's depth) have no influence on the value or the gradient.
    ``restrict_to``: optional vocabulary column ids (targets then index into them).
    """
    per_loop_logits = _restrict(per_loop_logits, restrict_to)
    loops, batch, n_cls = _check_logits(per_loop_logits)
    device = per_loop_logits.device
    depths_t = _as_long(depths, HOST, "depths")
    _check_depths(depths_t, loops, batch)
    targets = _as_long(path_targets, HOST, "path_targets")
    if targets.ndim != 2 or targets.shape[0] != batch:
        raise ValueError(f"path_targets must be [batch, depth], got {tuple(targets.shape)}")
    if batch and targets.shape[1] < int(depths_t.max()):
        raise ValueError("path_targets has fewer columns than the largest depth")
    width = min(loops, targets.shape[1])
    loop_idx = torch.arange(1, width + 1)  # [W]
    active = loop_idx[:, None] <= depths_t[None, :]  # [W, B]
    tgt = targets[:, :width].t()[active]  # [N], the active cells in row-major order
    if bool(((tgt < 0) | (tgt >= n_cls)).any()):
        raise ValueError("an active path target is outside [0, n_classes)")
    if tgt.shape[0] == 0:
        return per_loop_logits.sum() * 0.0
    # gather only the active cells: masked logits (even NaN/inf) never enter value or gradient
    at_loop, at_row = (index.to(device) for index in active.nonzero(as_tuple=True))
    cells = per_loop_logits[at_loop, at_row]  # [N, V]
    if cells.dtype in (torch.float16, torch.bfloat16):
        cells = cells.float()
    return F.cross_entropy(cells, tgt.to(device), reduction="mean")


def outcome_loss(
    per_loop_logits: Tensor,
    answers: Tensor | Sequence[int],
    depths: Tensor | Sequence[int],
    *,
    restrict_to: Tensor | Sequence[int] | None = None,
) -> Tensor:
    """Outcome-only supervision: CE at loop ``t = depths[b]`` against ``answers[b]``.

    Mean over rows. Every other loop's logits are ignored (value and gradient).
    """
    per_loop_logits = _restrict(per_loop_logits, restrict_to)
    loops, batch, n_cls = _check_logits(per_loop_logits)
    device = per_loop_logits.device
    depths_t = _as_long(depths, HOST, "depths")
    _check_depths(depths_t, loops, batch)
    ans = _as_long(answers, HOST, "answers")
    if ans.shape != (batch,):
        raise ValueError(f"answers must have shape [{batch}], got {tuple(ans.shape)}")
    if bool(((ans < 0) | (ans >= n_cls)).any()):
        raise ValueError("an answer is outside [0, n_classes)")
    final = per_loop_logits[(depths_t - 1).to(device), torch.arange(batch, device=device)]  # [B, V]
    if final.dtype in (torch.float16, torch.bfloat16):
        final = final.float()
    return F.cross_entropy(final, ans.to(device), reduction="mean")


def anneal_weight(step: int, total_steps: int, ramp_fraction: float) -> float:
    """Chain (intermediate-loss) weight for the anneal stage.

    ``w(step) = max(0, 1 - step / (ramp_fraction * total_steps))``: 1 at step 0, falls
    linearly to 0 at ``step = ramp_fraction * total_steps``, then holds 0.
    ``ramp_fraction = 0`` means outcome-only from the first step (w = 0).
    """
    if total_steps <= 0:
        raise ValueError("total_steps must be positive")
    if not 0.0 <= ramp_fraction <= 1.0:
        raise ValueError("ramp_fraction must lie in [0, 1]")
    if step < 0:
        raise ValueError("step must be >= 0")
    ramp = ramp_fraction * total_steps
    if ramp <= 0:
        return 0.0
    return max(0.0, 1.0 - step / ramp)


def anneal_loss(
    per_loop_logits: Tensor,
    path_targets: Tensor,
    answers: Tensor | Sequence[int],
    depths: Tensor | Sequence[int],
    weight: float,
    *,
    restrict_to: Tensor | Sequence[int] | None = None,
) -> Tensor:
    """``weight * intermediate_loss + (1 - weight) * outcome_loss``.

    ``weight`` normally comes from :func:`anneal_weight`. A term whose coefficient is
    exactly 0 is not computed.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError("weight must lie in [0, 1]")
    total = per_loop_logits.new_zeros(())
    if weight > 0:
        total = total + weight * intermediate_loss(per_loop_logits, path_targets, depths, restrict_to=restrict_to)
    if weight < 1:
        total = total + (1.0 - weight) * outcome_loss(per_loop_logits, answers, depths, restrict_to=restrict_to)
    return total
