"""How a stage trains: optimiser and learning-rate schedule, and the recurrence schedule of each step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from ledger.protocol.common import LateOptions as _LateOptions
from ledger.protocol.common import StrictModel
from ledger.protocol.common import located as _located
from ledger.protocol.names import KeyNameMap
from ledger.registry import Kind, KindUnion, Registry


@dataclass(frozen=True)
class RecurrenceKind(Kind):
    """How many loops a training step runs."""


RECURRENCES: Registry[RecurrenceKind] = Registry("recurrence schedule")


class LrSchedule(_LateOptions):
    """How a stage's learning rate moves: a multiplier on every group's lr (ratios kept)."""

    kind: Literal["constant", "cosine", "linear", "wsd"]
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up from lr/warmup_steps to lr.")
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="cosine/linear: the last step's lr is lr x this.")
    decay_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="wsd (warmup-stable-decay, the design-M seed's schedule: transformers' `warmup_stable_decay`): "
        "the share of the stage's steps, at its end, over which the rate decays by a half cosine to "
        "lr x min_lr_ratio; the warm-up rises linearly from lr x min_lr_ratio, and the rate holds between.",
    )

    _late_options = ("decay_fraction",)

    @model_validator(mode="after")
    def _decay(self) -> LrSchedule:
        if (self.kind == "wsd") != (self.decay_fraction is not None):
            raise _located("decay_fraction is the wsd schedule's, and wsd needs it", ["decay_fraction"])
        return self

    def scale(self, step: int, steps: int) -> float:
        """The multiplier at 0-based ``step`` of ``steps``."""
        if self.kind == "wsd":
            return self._warmup_stable_decay(step, steps)
        if self.warmup_steps and step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = max(steps - self.warmup_steps, 1)
        progress = min(max(step - self.warmup_steps, 0) / span, 1.0)
        floor = self.min_lr_ratio
        if self.kind == "linear":
            return floor + (1 - floor) * (1 - progress)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    def _warmup_stable_decay(self, step: int, steps: int) -> float:
        """transformers' ``get_wsd_schedule`` (linear warm-up, cosine decay), as the seed calls it: the decay's
        steps rounded up from the fraction, the stable part the rest (the tests hold it to transformers')."""
        floor, warmup = self.min_lr_ratio, self.warmup_steps
        decay = math.ceil(float(self.decay_fraction or 0) * steps)
        stable = steps - warmup - decay
        if step < warmup:
            return max(0.0, (step / max(1, warmup)) * (1 - floor) + floor)
        if step < warmup + stable:
            return 1.0
        if step < warmup + stable + decay:
            progress = (step - warmup - stable) / max(1, decay)
            return max(0.0, 0.5 * (1 + math.cos(math.pi * progress)) * (1 - floor) + floor)
        return floor


# Design M's learning rates (McLeish et al.: Muon stable at 1e-3 where AdamW at 5e-5 spiked): the default lr of
# each kind. An omitted lr is filled in before validation, so the canonical form always states the lr it ran at.
SEED_LEARNING_RATES = {"muon": 1e-3, "adamw": 5e-5}


class Optimizer(_LateOptions):
    kind: Literal["adamw", "muon"] = "adamw"
    lr: float = Field(gt=0, description="Default: the seed's rate of the kind (Muon 1e-3, AdamW 5e-5).")
    weight_decay: float = Field(default=0.0, ge=0)
    group_lrs: KeyNameMap[float] = Field(
        default_factory=dict,
        description="Per-tensor-group learning-rate multipliers (e.g. bridge_p: 0.1). Groups are whole tensors.",
    )
    schedule: LrSchedule | None = Field(default=None, description="Learning-rate schedule; none: constant lr.")
    grad_clip: float = Field(
        default=1.0, gt=0, description="The global gradient-norm clip of each step (the split-bridge paper: 0.5)."
    )
    adamw_lr: float | None = Field(
        default=None,
        gt=0,
        description="muon: the rate of the tensors Muon leaves to AdamW (embeddings, output head, norms); the "
        "design-M seed: 5e-5 beside Muon's 1e-3. Default: lr.",
    )
    betas: tuple[float, float] = Field(
        default=(0.9, 0.999), description="AdamW's betas (the design-M seed: 0.9, 0.95)."
    )

    _late_options = ("schedule", "grad_clip", "adamw_lr", "betas")

    @model_validator(mode="after")
    def _adamw_options(self) -> Optimizer:
        if self.adamw_lr is not None and self.kind != "muon":
            raise _located("adamw_lr is the rate of what Muon leaves to AdamW: give it with kind: muon", ["adamw_lr"])
        if not all(0 <= beta < 1 for beta in self.betas):
            raise _located("betas: two numbers in [0, 1)", ["betas"])
        return self

    @model_validator(mode="before")
    @classmethod
    def _seed_learning_rate(cls, data):
        if isinstance(data, dict) and "lr" not in data:
            kind = data.get("kind", "adamw")
            if kind in SEED_LEARNING_RATES:
                return {**data, "lr": SEED_LEARNING_RATES[kind]}
        return data


class RecurrenceSpec(StrictModel):
    """What every recurrence schedule's spec declares; a kind subclasses it with its ``kind`` literal."""

    if TYPE_CHECKING:
        kind: str


class ForcedRecurrence(RecurrenceSpec):
    kind: Literal["forced"]


class PoissonLognormalRecurrence(RecurrenceSpec):
    """Design M's sampled recurrence: r ~ Poisson(LogNormal) + 1 per step, the last ``backprop_depth`` with gradient.

    The published sampler's mean is ``max(k, s) + 1``, not ``k`` (``arms.train.recurrence``). ``offset``
    says how that is handled: ``published`` draws exactly the seed's sampler (and its FLOPs are counted at
    the realised draws, so the +1 is paid and recorded); ``corrected`` draws with mean exactly ``k`` for every
    ``k >= 1`` (a curriculum mean below ``s`` then really is below ``s``). A ``published`` curriculum that
    starts below ``backprop_depth`` is refused: its first part would be a no-op (the mean stays ``s + 1``).
    """

    kind: Literal["poisson_lognormal"]
    mean: float = Field(gt=0, description="k: the nominal mean recurrence (the seed's train recurrence).")
    sigma: float = Field(default=0.5, gt=0)
    backprop_depth: int = Field(default=8, ge=1, description="s: the last min(s, r) iterations record gradients.")
    offset: Literal["published", "corrected"] = "published"
    curriculum: Literal["none", "linear", "one_minus_sqrt"] = "none"
    curriculum_start: float = Field(default=1.0, gt=0, description="The mean at step 0 of a curriculum.")
    curriculum_fraction: float = Field(default=0.0, ge=0, le=1, description="The ramp's share of the stage's steps.")
    backprop_curriculum: Literal["none", "linear", "one_minus_sqrt"] = Field(
        default="none", description="Also ramp the backprop depth from backprop_start to backprop_depth."
    )
    backprop_start: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _curricula(self) -> PoissonLognormalRecurrence:
        ramps = self.curriculum != "none" or self.backprop_curriculum != "none"
        if ramps and self.curriculum_fraction == 0:
            raise _located("a curriculum needs curriculum_fraction > 0 (the share of steps it ramps over)", [])
        if self.curriculum != "none" and self.curriculum_start > self.mean:
            raise _located(
                f"curriculum_start {self.curriculum_start} is above the mean {self.mean}", ["curriculum_start"]
            )
        if self.backprop_curriculum != "none" and self.backprop_start > self.backprop_depth:
            raise _located("backprop_start is above backprop_depth", ["backprop_start"])
        if self.offset == "published" and self.curriculum != "none" and self.curriculum_start < self.backprop_depth:
            raise _located(
                f"with offset: published the sampler's mean is max(k, s) + 1, so a curriculum from "
                f"{self.curriculum_start} below backprop_depth {self.backprop_depth} draws mean "
                f"{self.backprop_depth + 1} until k reaches s: use offset: corrected, or start at s",
                ["curriculum_start"],
            )
        return self


RECURRENCES.add(
    RecurrenceKind("forced", ForcedRecurrence, "arms.train.recurrence:ForcedSchedule", "loops = the row's depth")
)
RECURRENCES.add(
    RecurrenceKind(
        "poisson_lognormal",
        PoissonLognormalRecurrence,
        "arms.train.recurrence:PoissonLognormalSampler",
        "design M's sampled recurrence (mean, sigma, truncated backprop, curricula)",
    )
)
# open: a schedule a plugin registers joins (``RECURRENCES.add``)
Recurrence = Annotated[RecurrenceSpec, KindUnion(RECURRENCES)]
