"""Claims over every checkpoint of an arm (docs/science.md, the split-bridge paper's other experiments): the acquisition-retention boundary, and a measure's
trend across the checkpoints of one run.

The paper's finding is a boundary: a second operation can be learnt alone, but no checkpoint trained on it kept
the first operation and the general checks at once. ``keeps_all`` states that over every checkpoint of an arm
that read each condition's manifest (each stage's checkpoint, read by its gates or the arm's evaluation): a
checkpoint *keeps all* when every condition holds there (accuracy over the rows, or the lowest per-depth
accuracy, at least a threshold). ``expect: none`` is supported when no checkpoint keeps all; ``some`` when one
does.

``checkpoint_trend`` follows one measure across the arm's checkpoints in recording order (each stage's, and every
``checkpoint_every`` step's, read on the manifest): the paper's "more language training raised the relay mean but
the worst deep-tail minimum fell" is two such claims on one run (accuracy rises; the lowest per-depth accuracy over
depths 11-12 falls), comparing the last checkpoint with the first.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ledger.protocol.claim_common import ClaimSpec
from ledger.protocol.common import StrictModel
from ledger.protocol.common import located as _located
from ledger.protocol.names import KeyName


class KeepCondition(StrictModel):
    manifest: KeyName
    measure: Literal["accuracy", "min_per_depth"] = Field(
        default="accuracy", description="accuracy: over every row; min_per_depth: the lowest per-depth accuracy."
    )
    at_least: float = Field(ge=0, le=1)

    def describe(self) -> str:
        what = "accuracy" if self.measure == "accuracy" else "min per-depth accuracy"
        return f"{self.manifest} {what} >= {self.at_least:g}"


class KeepsAllClaim(ClaimSpec):
    """Whether any checkpoint of ``arm`` meets every condition at once (``manifest`` is the first condition's)."""

    statistic: Literal["keeps_all"]
    arm: KeyName
    conditions: list[KeepCondition] = Field(min_length=2)
    expect: Literal["none", "some"] = "none"

    def holds_without_acquisition(self) -> bool:
        return self.expect == "none"  # no checkpoint keeps both: nor does one that learnt neither

    @model_validator(mode="after")
    def _first_condition_is_the_manifest(self) -> KeepsAllClaim:
        if self.conditions[0].manifest != self.manifest:
            raise _located("`manifest` names the first condition's manifest", ["manifest"])
        if self.rows.depths is not None:
            raise _located("keeps_all reads each condition over all its rows: no row filter", ["rows"])
        return self


class CheckpointTrendClaim(ClaimSpec):
    """A measure of ``arm`` on ``manifest`` (its rows filtered by ``rows``) rises or falls from the first
    checkpoint that read it to the last."""

    statistic: Literal["checkpoint_trend"]
    arm: KeyName
    measure: Literal["accuracy", "min_per_depth"] = "accuracy"
    direction: Literal["rises", "falls"]

    def holds_without_acquisition(self) -> bool:
        return self.direction == "falls"
