"""Choosing depth: the exit rules an arm is read under (an evaluation option) and the claims on them.

An arm read at loops 1..K with ``exit_rules`` records each loop's signals (``ledger/reader/exit_rules.py``) and
marks, per rule, the reading a row stops at. An ``adaptive_depth`` claim compares that chosen reading with the
forced-depth reading of the same row (the loop its question names): the share of rows where the rule chose the
row's own depth, or paired non-inferiority of the answer at the chosen loop against the forced one; every such
claim reports the mean loops used and the compute saved against forced depth.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ledger.protocol.claim_common import ClaimSpec
from ledger.protocol.common import StrictModel
from ledger.protocol.common import located as _located
from ledger.protocol.names import KeyName

ExitRuleName = Literal["kl", "entropy", "argmax", "halting"]
# The default threshold of each rule (the rule's own unit: nats, nats, loops, probability).
DEFAULT_THRESHOLDS: dict[str, float] = {"kl": 1e-3, "entropy": 1e-3, "argmax": 5, "halting": 0.5}
EXIT_RULES = tuple(DEFAULT_THRESHOLDS)


def rule_label(rule: str, threshold: float | None) -> str:
    """How a chosen reading is marked (``kl<0.001``): the rule and its threshold, read back by the judge."""
    value = DEFAULT_THRESHOLDS[rule] if threshold is None else threshold
    return f"{rule}<{value:g}" if rule in ("kl", "entropy") else f"{rule}>={value:g}"


class ExitRule(StrictModel):
    """A rule that stops a row's loops (Huginn's exit criteria, or a halting head's decision)."""

    rule: ExitRuleName = Field(
        description="kl: KL(previous || this loop's answer distribution) < threshold; entropy: |H_t - H_t-1| < "
        "threshold; argmax: the prediction unchanged for `threshold` consecutive loops; halting: the arm's halting "
        "head's probability >= threshold."
    )
    threshold: float | None = Field(
        default=None,
        gt=0,
        description="Default per rule: kl 1e-3 (Huginn's current code; its older 5e-4), entropy 1e-3, argmax 5, "
        "halting 0.5.",
    )

    def value(self) -> float:
        return DEFAULT_THRESHOLDS[self.rule] if self.threshold is None else self.threshold

    def label(self) -> str:
        return rule_label(self.rule, self.threshold)

    @model_validator(mode="after")
    def _sensible(self) -> ExitRule:
        if self.rule == "argmax" and self.threshold is not None and self.threshold != int(self.threshold):
            raise _located("an argmax threshold counts loops: a whole number", ["threshold"])
        if self.rule == "halting" and self.threshold is not None and self.threshold > 1:
            raise _located("a halting threshold is a probability: at most 1", ["threshold"])
        return self


class HaltingHead(StrictModel):
    """A learned halting head on a recurrent arm: a linear probe of the block state at the answer position
    (layer-normalised, no affine) giving each loop's halting probability lambda_t; trained by a stage with a
    ``halting_ponder`` or ``halting_supervised`` objective while the block stays frozen, over loops 1..max_loops
    (lambda at max_loops is taken as 1, so the halting distribution sums to one)."""

    max_loops: int = Field(ge=2, le=64, description="The loops the head is trained and read over.")
    prior: float = Field(
        default=0.2, gt=0, lt=1, description="PonderNet's geometric prior lambda_p (truncated at max_loops)."
    )
    beta: float = Field(default=0.01, ge=0, description="PonderNet's weight of KL(halting || prior).")


class AdaptiveDepthClaim(ClaimSpec):
    """An exit rule against forced depth on the same rows (each row read at loops 1..K; forced = the loop its
    question names). ``right_depth``: the share of rows where the rule stopped at the row's depth, at least (or
    at most) ``share``. ``noninferior``: the answer at the chosen loop is paired non-inferior to the forced
    answer within ``margin`` (Tango's score test). Both report the mean loops used and the compute saved
    (1 - mean loops used / mean forced loops)."""

    statistic: Literal["adaptive_depth"]
    arm: KeyName
    rule: ExitRuleName
    threshold: float | None = Field(default=None, gt=0, description="The rule's threshold (default per rule).")
    measure: Literal["right_depth", "noninferior"]
    share: float | None = Field(default=None, ge=0, le=1, description="right_depth: the share it is held to.")
    direction: Literal["at_least", "at_most"] = "at_least"
    margin: float | None = Field(default=None, gt=0, lt=1, description="noninferior: the margin.")
    alpha: float = Field(default=0.05, gt=0, lt=1)

    NEEDS: ClassVar[dict[str, str]] = {"right_depth": "share", "noninferior": "margin"}

    def exit_rule(self) -> ExitRule:
        return ExitRule(rule=self.rule, threshold=self.threshold)

    def holds_without_acquisition(self) -> bool:
        # a rule's answers tie forced depth's when neither answers anything; a right-depth share held low
        return self.measure == "noninferior" or self.direction == "at_most"

    @model_validator(mode="after")
    def _measure_fields(self) -> AdaptiveDepthClaim:
        needed = self.NEEDS[self.measure]
        if getattr(self, needed) is None:
            raise _located(f"a {self.measure} claim needs `{needed}`", [needed])
        for other in set(self.NEEDS.values()) - {needed}:
            if getattr(self, other) is not None:
                raise _located(f"`{other}` is for a {_measure_of(other)} claim, not {self.measure}", [other])
        if self.measure == "right_depth" and self.family is not None:
            raise _located("a right_depth claim has no p-value: it can be in no multiplicity family", ["family"])
        return self


def _measure_of(field: str) -> str:
    return next(measure for measure, needed in AdaptiveDepthClaim.NEEDS.items() if needed == field)


def declared_exit(evaluation: Any, claim: AdaptiveDepthClaim) -> bool:
    """Whether an arm's evaluation declares the claim's rule at the claim's threshold."""
    wanted = claim.exit_rule().label()
    return any(rule.label() == wanted for rule in evaluation.exit_rules)
