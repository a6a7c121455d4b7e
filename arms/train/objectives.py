"""Training losses and recurrence schedules, model-agnostic.

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
- :class:`ForcedRecurrence` - design S: loops = the depth written in the question
  (a mixed-depth batch runs ``max(depth)`` loops and reads loop ``depth`` per row).
- :class:`PoissonLognormalSampler` - design M's published sampler (see its docstring
  for the ``E[r]`` offset: ``E[r] = max(k, s) + 1``, i.e. ``k + 1`` only when ``k >= s``).
- :func:`split_no_grad` - truncated backprop split ``(max(r - s, 0), min(s, r))``.
- :func:`curriculum_mean` - linear or 1-sqrt rise of the mean recurrence.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "encode_path_targets",
    "intermediate_loss",
    "outcome_loss",
    "anneal_weight",
    "anneal_loss",
    "ForcedRecurrence",
    "PoissonLognormalSampler",
    "split_no_grad",
    "run_truncated_recurrence",
    "curriculum_mean",
    "step_seed",
]

IGNORE_INDEX = -100


# ----------------------------------------------------------------------------- helpers


def _check_logits(per_loop_logits: Tensor) -> tuple[int, int, int]:
    if per_loop_logits.ndim != 3:
        raise ValueError(
            f"per_loop_logits must be [loops, batch, n_classes], got shape {tuple(per_loop_logits.shape)}"
        )
    return tuple(per_loop_logits.shape)  # type: ignore[return-value]


def _as_long(x: Tensor | Sequence[int], device: torch.device, name: str) -> Tensor:
    t = torch.as_tensor(x, device=device)
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"{name} must be integer, got {t.dtype}")
    return t.long()


def _check_depths(depths: Tensor, loops: int, batch: int) -> None:
    if depths.shape != (batch,):
        raise ValueError(f"depths must have shape [{batch}], got {tuple(depths.shape)}")
    if batch and int(depths.min()) < 1:
        raise ValueError("every depth must be >= 1")
    if batch and int(depths.max()) > loops:
        raise ValueError(
            f"a row has depth {int(depths.max())} but only {loops} loops were run "
            "(forced depth needs loops >= depth)"
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
    depths_t = _as_long(depths, device, "depths")
    _check_depths(depths_t, loops, batch)
    targets = _as_long(path_targets, device, "path_targets")
    if targets.ndim != 2 or targets.shape[0] != batch:
        raise ValueError(f"path_targets must be [batch, depth], got {tuple(targets.shape)}")
    if batch and targets.shape[1] < int(depths_t.max()):
        raise ValueError("path_targets has fewer columns than the largest depth")
    width = min(loops, targets.shape[1])
    loop_idx = torch.arange(1, width + 1, device=device)  # [W]
    active = loop_idx[:, None] <= depths_t[None, :]  # [W, B]
    tgt = targets[:, :width].t()  # [W, B]
    if bool(((tgt[active] < 0) | (tgt[active] >= n_cls)).any()):
        raise ValueError("an active path target is outside [0, n_classes)")
    # gather only the active cells: masked logits (even NaN/inf) never enter value or gradient
    cells = per_loop_logits[:width][active]  # [N, V]
    if cells.dtype in (torch.float16, torch.bfloat16):
        cells = cells.float()
    if cells.shape[0] == 0:
        return per_loop_logits.sum() * 0.0
    return F.cross_entropy(cells, tgt[active], reduction="mean")


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
    depths_t = _as_long(depths, device, "depths")
    _check_depths(depths_t, loops, batch)
    ans = _as_long(answers, device, "answers")
    if ans.shape != (batch,):
        raise ValueError(f"answers must have shape [{batch}], got {tuple(ans.shape)}")
    if bool(((ans < 0) | (ans >= n_cls)).any()):
        raise ValueError("an answer is outside [0, n_classes)")
    final = per_loop_logits[depths_t - 1, torch.arange(batch, device=device)]  # [B, V]
    if final.dtype in (torch.float16, torch.bfloat16):
        final = final.float()
    return F.cross_entropy(final, ans, reduction="mean")


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


# ----------------------------------------------------------------------------- recurrence


@dataclass(frozen=True)
class ForcedRecurrence:
    """Design S: loops = the depth written in the question.

    A batch of mixed depths runs ``loops(depths) = max(depths)`` loops; each row is
    read at loop ``readout_loops(depths)[b] = depths[b]``. All loops keep gradients
    (``split(r) = (0, r)``).
    """

    def loops(self, depths: Tensor | Sequence[int]) -> int:
        d = torch.as_tensor(depths)
        if d.numel() == 0 or int(d.min()) < 1:
            raise ValueError("depths must be non-empty and >= 1")
        return int(d.max())

    def readout_loops(self, depths: Tensor | Sequence[int]) -> Tensor:
        return torch.as_tensor(depths).long()

    def split(self, r: int) -> tuple[int, int]:
        return 0, int(r)


def step_seed(base_seed: int, step: int) -> int:
    """A 63-bit seed from SHA-256 of ``"<base_seed>:<step>"`` (stable across runs/ranks)."""
    digest = hashlib.sha256(f"{int(base_seed)}:{int(step)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class PoissonLognormalSampler:
    """Design M's published recurrence sampler (Poisson-Lognormal, mean ``k``).

    For training step ``step`` with mean recurrence ``k`` and backprop depth ``s``::

        t      = max(k - s, 0)
        mu     = ln(t + s) - sigma^2 / 2
        lambda ~ LogNormal(mu, sigma)
        r      = Poisson(lambda) + 1

    **The offset.** ``E[lambda] = exp(mu + sigma^2/2) = t + s = max(k, s)``, so
    ``E[r] = max(k, s) + 1``: one more than the nominal mean when ``k >= s`` (the
    published FLOPs count ignored this +1), and ``s + 1`` - not ``k + 1`` - whenever
    ``k < s`` (a recurrence curriculum whose mean starts below ``s`` does not lower the
    sampled mean below ``s + 1`` with this sampler). :meth:`true_mean` returns this
    exact value (closed form, no estimate).

    **Determinism.** Each draw uses a fresh ``numpy.random.Generator(PCG64)`` seeded by
    :func:`step_seed` (SHA-256 of ``(seed, step)``): the same ``(seed, step, k)`` always
    gives the same ``r`` - on every rank and after a resume - and draws at different
    steps are independent. No hidden state advances between calls.
    """

    def __init__(self, mean: float, sigma: float = 0.5, backprop_depth: int = 8, seed: int = 0):
        if mean <= 0:
            raise ValueError("mean recurrence must be positive")
        if sigma <= 0:
            raise ValueError("sigma must be positive")
        if backprop_depth < 1:
            raise ValueError("backprop_depth must be >= 1")
        self.mean = float(mean)
        self.sigma = float(sigma)
        self.backprop_depth = int(backprop_depth)
        self.seed = int(seed)

    def _mu(self, k: float) -> float:
        s = self.backprop_depth
        t = max(k - s, 0.0)
        return math.log(t + s) - self.sigma**2 / 2

    def sample(self, step: int, mean: float | None = None) -> int:
        """The recurrence ``r >= 1`` for training step ``step`` (optionally another mean,
        e.g. from :func:`curriculum_mean`)."""
        k = self.mean if mean is None else float(mean)
        if k <= 0:
            raise ValueError("mean recurrence must be positive")
        rng = np.random.Generator(np.random.PCG64(step_seed(self.seed, step)))
        lam = rng.lognormal(self._mu(k), self.sigma)
        return int(rng.poisson(lam)) + 1

    __call__ = sample

    def sample_split(self, step: int, mean: float | None = None) -> tuple[int, int]:
        """``split_no_grad(sample(step), backprop_depth)``."""
        return split_no_grad(self.sample(step, mean), self.backprop_depth)

    def true_mean(self, mean: float | None = None) -> float:
        """Exact ``E[r] = max(k, s) + 1`` (see class docstring)."""
        k = self.mean if mean is None else float(mean)
        s = self.backprop_depth
        return max(k - s, 0.0) + s + 1.0

    def true_mean_grad_iters(self, mean: float | None = None) -> float:
        """``E[min(s, r)]`` (iterations with gradient), by numeric integration.

        Integrates the Poisson mixture over a Gauss-Hermite grid in ``log lambda``
        (64 nodes); accurate to ~1e-6 for the sigma used here. Useful for the
        ``(6 N1 + 2 N2) D`` FLOPs count.
        """
        k = self.mean if mean is None else float(mean)
        s = self.backprop_depth
        mu = self._mu(k)
        nodes, weights = np.polynomial.hermite_e.hermegauss(64)
        lams = np.exp(mu + self.sigma * nodes)  # [64]
        w = weights / weights.sum()
        # r = n + 1 with n ~ Poisson(lambda): min(s, r) = n + 1 for n <= s - 2, else s
        n = np.arange(0, s - 1)  # [s - 1]
        log_fact = np.array([math.lgamma(i + 1.0) for i in n])
        pmf = np.exp(-lams[:, None] + n[None, :] * np.log(lams[:, None]) - log_fact[None, :])
        e = (pmf * (n + 1)[None, :]).sum(1) + s * (1.0 - pmf.sum(1))
        total = float((w * e).sum())
        return float(total)


def split_no_grad(r: int, s: int) -> tuple[int, int]:
    """Truncated backprop: ``(no_grad_iters, grad_iters) = (max(r - s, 0), min(s, r))``.

    The first ``no_grad_iters`` iterations run under ``torch.no_grad()``, the last
    ``grad_iters`` with gradient; they always sum to ``r``.
    """
    r, s = int(r), int(s)
    if r < 0 or s < 0:
        raise ValueError("r and s must be non-negative")
    return max(r - s, 0), min(s, r)


def run_truncated_recurrence(
    step_fn: Callable[[Tensor], Tensor], state: Tensor, r: int, s: int
) -> Tensor:
    """Apply ``state = step_fn(state)`` ``r`` times, the first ``max(r - s, 0)`` without
    gradient (the state is detached where gradient starts), the last ``min(s, r)`` with.

    ``step_fn`` closes over whatever is re-injected each iteration (e.g. the prelude
    output ``e`` of design M).
    """
    no_grad_iters, grad_iters = split_no_grad(r, s)
    if no_grad_iters:
        with torch.no_grad():
            for _ in range(no_grad_iters):
                state = step_fn(state)
        state = state.detach()
    for _ in range(grad_iters):
        state = step_fn(state)
    return state


# ----------------------------------------------------------------------------- curriculum


def curriculum_mean(
    step: int,
    total: int,
    start: float,
    end: float,
    fraction: float,
    kind: Literal["linear", "one_minus_sqrt"] = "linear",
) -> float:
    """Mean recurrence at ``step``: rises from ``start`` to ``end`` over the first
    ``fraction * total`` steps, then holds ``end``.

    With progress ``x = min(step / (fraction * total), 1)``:

    - ``linear``:          ``start + (end - start) * x``
    - ``one_minus_sqrt``:  ``start + (end - start) * (1 - sqrt(1 - x))`` - the
      "1-sqrt" shape applied to the remaining distance: the mean stays near ``start``
      longest and rises fastest at the end of the ramp (slope 1/2 of linear at x = 0);
      it lies at or below the linear ramp everywhere, so it spends fewer FLOPs.

    Both are monotone (non-decreasing when ``end >= start``) and hit both endpoints
    exactly. ``fraction = 0`` holds ``end`` from step 0. Returns a float; round it if
    an integer mean is wanted (:class:`PoissonLognormalSampler` accepts floats).
    """
    if total <= 0:
        raise ValueError("total must be positive")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError("fraction must lie in [0, 1]")
    if step < 0:
        raise ValueError("step must be >= 0")
    ramp = fraction * total
    x = 1.0 if ramp <= 0 else min(step / ramp, 1.0)
    if kind == "linear":
        f = x
    elif kind == "one_minus_sqrt":
        f = 1.0 - math.sqrt(1.0 - x)
    else:
        raise ValueError(f"unknown curriculum kind {kind!r} (linear | one_minus_sqrt)")
    return float(start + (end - start) * f)
