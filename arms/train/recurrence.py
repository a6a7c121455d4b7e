"""Recurrence schedules: forced depth (design S), design M's Poisson-Lognormal sampler, truncated
backprop and curricula of the mean recurrence. Seeded by step, model-agnostic."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

# ----------------------------------------------------------------------------- recurrence


@dataclass(frozen=True)
class ForcedSchedule:
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

    def __init__(
        self, mean: float, sigma: float = 0.5, backprop_depth: int = 8, seed: int = 0, offset: str = "published"
    ):
        if offset not in ("published", "corrected"):
            raise ValueError(f"offset must be 'published' or 'corrected', got {offset!r}")
        self.offset = offset
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

    def _lambda_mean(self, k: float) -> float:
        """E[lambda]: ``max(k, s)`` for the published sampler; ``k - 1`` corrected (so that E[r] = k)."""
        if self.offset == "corrected":
            return k - 1.0
        s = self.backprop_depth
        return max(k - s, 0.0) + s

    def _mu(self, k: float) -> float:
        return math.log(self._lambda_mean(k)) - self.sigma**2 / 2

    def sample(self, step: int, mean: float | None = None) -> int:
        """The recurrence ``r >= 1`` for training step ``step`` (optionally another mean,
        e.g. from :func:`curriculum_mean`)."""
        k = self.mean if mean is None else float(mean)
        if k <= 0:
            raise ValueError("mean recurrence must be positive")
        if self._lambda_mean(k) <= 0:  # corrected, k <= 1: r = 1 is the only draw with mean <= 1
            return 1
        rng = np.random.Generator(np.random.PCG64(step_seed(self.seed, step)))
        lam = rng.lognormal(self._mu(k), self.sigma)
        return int(rng.poisson(lam)) + 1

    __call__ = sample

    def sample_split(self, step: int, mean: float | None = None) -> tuple[int, int]:
        """``split_no_grad(sample(step), backprop_depth)``."""
        return split_no_grad(self.sample(step, mean), self.backprop_depth)

    def true_mean(self, mean: float | None = None) -> float:
        """Exact ``E[r]``: ``max(k, s) + 1`` published (see class docstring), ``max(k, 1)`` corrected."""
        k = self.mean if mean is None else float(mean)
        return max(self._lambda_mean(k), 0.0) + 1.0

    def true_mean_grad_iters(self, mean: float | None = None) -> float:
        """``E[min(s, r)]`` (iterations with gradient), by numeric integration.

        Integrates the Poisson mixture over a Gauss-Hermite grid in ``log lambda``
        (64 nodes); accurate to ~1e-6 for the sigma used here. Useful for the
        ``(6 N1 + 2 N2) D`` FLOPs count.
        """
        k = self.mean if mean is None else float(mean)
        s = self.backprop_depth
        if self._lambda_mean(k) <= 0:
            return 1.0
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


def run_truncated_recurrence(step_fn: Callable[[Tensor], Tensor], state: Tensor, r: int, s: int) -> Tensor:
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


# ----------------------------------------------------------------------------- a stage's draws


@dataclass(frozen=True)
class StepRecurrence:
    """One training step's recurrence: ``loops`` iterations, the last ``grad_loops`` with gradient."""

    loops: int
    grad_loops: int
    mean: float  # the nominal mean k at this step (after the curriculum)

    @property
    def no_grad_loops(self) -> int:
        return self.loops - self.grad_loops


def stage_recurrence(spec, step: int, steps: int, seed: int) -> StepRecurrence:
    """The draw of step ``step`` of a ``steps``-step stage for a ``poisson_lognormal`` spec
    (``ledger.protocol.training.PoissonLognormalRecurrence``): the curriculum of the mean and of the
    backprop depth at that step, then the sampler seeded by ``(seed, step)``, so every rank and
    every resume draws the same."""
    mean = float(spec.mean)
    if spec.curriculum != "none":
        mean = curriculum_mean(step, steps, spec.curriculum_start, spec.mean, spec.curriculum_fraction, spec.curriculum)
    depth = int(spec.backprop_depth)
    if spec.backprop_curriculum != "none":
        ramp = curriculum_mean(
            step, steps, spec.backprop_start, spec.backprop_depth, spec.curriculum_fraction, spec.backprop_curriculum
        )
        depth = max(1, int(round(ramp)))
    sampler = PoissonLognormalSampler(mean, spec.sigma, depth, seed, offset=spec.offset)
    loops = sampler.sample(step)
    return StepRecurrence(loops, split_no_grad(loops, depth)[1], mean)
