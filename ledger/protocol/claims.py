"""Claim files: what a protocol preregisters it will test, and how.

A claim names a statistic over row-level evidence, the arms (or gate) it is about,
the manifest and row filter, the direction and the alpha / threshold / margin, and
the multiplicity family it belongs to. Claim files are validated with the same strict
models as protocols, and every reference is checked against the protocol that
preregisters them (``check_claims_against``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from ledger.protocol.checkpoint_claims import CheckpointTrendClaim, KeepsAllClaim
from ledger.protocol.claim_common import STATISTICS as STATISTICS
from ledger.protocol.claim_common import ClaimSpec, Precondition
from ledger.protocol.claim_common import RowFilter as RowFilter
from ledger.protocol.claim_common import StatisticKind as StatisticKind
from ledger.protocol.common import StrictModel
from ledger.protocol.common import located as _located
from ledger.protocol.depth_choice import AdaptiveDepthClaim
from ledger.protocol.loader import ProtocolIssue, load_model_file
from ledger.protocol.names import KeyName, KeyNameMap
from ledger.protocol.protocol import Protocol
from ledger.registry import KindUnion


class PairedExactClaim(ClaimSpec):
    """Exact McNemar / sign test on the discordant pairs of two arms on the same rows."""

    statistic: Literal["paired_exact"]
    arms: tuple[KeyName, KeyName]
    direction: Literal["greater", "less", "two-sided"] = "greater"
    alpha: float = Field(default=0.05, gt=0, lt=1)
    loop: int | None = Field(default=None, ge=1, description="Read at this loop (e.g. 1) instead of the forced depth.")
    at_step: int | None = Field(
        default=None,
        ge=1,
        description="Read each arm's checkpoint at this step of its stage (a stage's checkpoint_every checkpoints, or "
        "its last step) instead of its final checkpoint: transfer claims per step, each its own family member.",
    )
    loops: tuple[int, int] | None = Field(
        default=None,
        description="Read arms[0] at loops[0] and arms[1] at loops[1]: one arm at two test recurrences (does its "
        "accuracy rise with recurrence?), or two arms each at its own.",
    )
    seeds: Literal["every", "pooled"] | None = Field(
        default=None,
        description="How the test combines the training seeds of an arm replicated over seeds (`seeds:` on the "
        "arm): every (each seed's own exact test at alpha, supported only when every seed's is: an "
        "intersection-union test) or pooled (one exact test on the discordant pairs of every seed, stratified by "
        "seed). Needed when an arm it compares is replicated.",
    )
    ADDED_LATER: ClassVar[dict[str, Any]] = {
        **ClaimSpec.ADDED_LATER,
        "loop": None,
        "at_step": None,
        "loops": None,
        "seeds": None,
    }

    def holds_without_acquisition(self) -> bool:
        return self.direction == "less"  # arms[0] behind arms[1]: so is an arm that learnt nothing

    @model_validator(mode="after")
    def _one_reading(self) -> PairedExactClaim:
        if self.loop is not None and self.at_step is not None:
            raise _located("at_step reads each row's final loop at that step: give loop or at_step, not both", ["loop"])
        if self.loops is not None and (self.loop is not None or self.at_step is not None):
            raise _located("loops names each arm's loop: give loops, or loop / at_step, not both", ["loops"])
        if self.loops is not None and min(self.loops) < 1:
            raise _located("loops: loop counts of 1 or more", ["loops"])
        if self.arms[0] == self.arms[1] and (self.loops is None or self.loops[0] == self.loops[1]):
            raise _located("an arm against itself needs two different loops (loops: [T, 1])", ["arms"])
        return self

    def arm_loops(self) -> tuple[int | None, int | None]:
        """The loop each arm is read at (None: the row's final loop)."""
        return self.loops if self.loops is not None else (self.loop, self.loop)


class AccuracyClaim(ClaimSpec):
    """One arm's accuracy on the filtered rows is at least (or at most) a threshold."""

    statistic: Literal["accuracy"]
    arm: KeyName
    threshold: float = Field(ge=0, le=1)
    direction: Literal["at_least", "at_most"] = "at_least"
    loop: int | None = Field(
        default=None,
        ge=1,
        description="Read at this test recurrence (an answer read at every loop, e.g. word problems at 4) instead of "
        "each row's final loop.",
    )

    ADDED_LATER: ClassVar[dict[str, Any]] = {**ClaimSpec.ADDED_LATER, "loop": None}

    def holds_without_acquisition(self) -> bool:
        return self.direction == "at_most"


class NonInferiorityClaim(ClaimSpec):
    """Paired non-inferiority of arms[0] against arms[1] with a margin (Tango's score test)."""

    statistic: Literal["noninferiority"]
    arms: tuple[KeyName, KeyName]
    margin: float = Field(gt=0, lt=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    loop: int | None = Field(default=None, ge=1, description="Read at this loop (e.g. 1) instead of the forced depth.")

    def holds_without_acquisition(self) -> bool:
        return True  # two arms that learnt nothing tie: non-inferior


class FrontierClaim(ClaimSpec):
    """The threshold-crossing frontier divided by the training support's top depth."""

    statistic: Literal["frontier_ratio"]
    arm: KeyName
    bar: float = Field(default=0.71, gt=0, lt=1)
    support_max_depth: int = Field(ge=1)
    threshold: float = Field(gt=0)
    direction: Literal["at_least", "at_most"] = "at_least"

    def holds_without_acquisition(self) -> bool:
        return self.direction == "at_most"


class SupportScalingClaim(ClaimSpec):
    """Frontier / support across training supports (the paper's support scaling): each arm's frontier at the
    bar divided by its training support's top depth; every ratio at least ``threshold``, and the supports' mean
    ratios (arms at one support are seeds: each shown, their mean the support's ratio) spread (max - min) at
    most ``max_spread``. An arm may be read on its own manifest (``manifests``; e.g. N24 rows for support 12)."""

    statistic: Literal["support_scaling"]
    arms: tuple[KeyName, ...] = Field(min_length=2)
    supports: tuple[int, ...] = Field(description="Each arm's training support (top training depth), in order.")
    manifests: KeyNameMap[KeyName] = Field(
        default_factory=dict, description="arm -> the manifest it is read on, where it is not `manifest`."
    )
    bar: float = Field(default=0.71, gt=0, lt=1)
    threshold: float = Field(gt=0)
    max_spread: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _members(self) -> SupportScalingClaim:
        if len(self.supports) != len(self.arms):
            raise _located(
                f"{len(self.arms)} arms but {len(self.supports)} supports: one support per arm", ["supports"]
            )
        if any(support < 1 for support in self.supports):
            raise _located("a support is a depth: 1 or more", ["supports"])
        if len(set(self.arms)) != len(self.arms):
            raise _located("an arm is named twice", ["arms"])
        if len(set(self.supports)) < 2:
            raise _located("support scaling needs arms at two supports or more", ["supports"])
        unknown = sorted(set(self.manifests) - set(self.arms))
        if unknown:
            raise _located(f"manifests names {unknown[0]!r}, not one of the claim's arms", ["manifests"])
        if self.rows.depths is not None:
            raise _located("a support-scaling frontier is read over every evaluated depth: no depth filter", ["rows"])
        return self


class PersistenceClaim(ClaimSpec):
    """Persistence after an outcome-only anneal, rows run past their depth (docs/science.md, design S): the share of active
    cells (loop <= depth) whose state is the loop's intermediate symbol, or of the cells above the diagonal
    (depth < loop) that advance one more hop, or stay on the answer, at least (or at most) a threshold."""

    statistic: Literal["persistence"]
    arm: KeyName
    cells: Literal["active", "advance", "stay"]
    threshold: float = Field(ge=0, le=1)
    direction: Literal["at_least", "at_most"] = "at_least"

    def holds_without_acquisition(self) -> bool:
        return self.direction == "at_most"


class GateClaim(ClaimSpec):
    """A preregistered gate passed (or failed) for an arm."""

    statistic: Literal["gate"]
    gate: KeyName
    arm: KeyName
    expect: Literal["pass", "fail"] = "pass"


class _TwoArmsAtLoops(ClaimSpec):
    arms: tuple[KeyName, KeyName]
    loops: tuple[int, int] = Field(description="The test recurrence each arm is read at (1 for a one-pass arm).")
    alpha: float = Field(default=0.05, gt=0, lt=1)


class PairedLossClaim(_TwoArmsAtLoops):
    """arms[0]'s next-token loss against arms[1]'s on the same documents: a one-sided Wilcoxon signed-rank test
    of the per-document differences (nats per token). ``less``: arms[0] lower by more than ``margin``;
    ``at_most``: arms[0] no higher than arms[1] + ``margin`` (non-inferiority)."""

    statistic: Literal["paired_loss"]
    direction: Literal["less", "at_most"] = "less"
    margin: float = Field(default=0.0, ge=0, description="Nats per token.")


class EqualFlopsClaim(_TwoArmsAtLoops):
    """arms[0] better than arms[1] at equal training FLOPs: at F, the FLOPs where the earlier-stopping arm
    stopped, that arm's final checkpoint against the other's curve (``checkpoint_every``) at F. Loss: per
    document, linear interpolation in FLOPs between the two checkpoints around F, then the paired loss test.
    Accuracy: the other arm's last checkpoint at or below F (it never gets more compute), exact McNemar."""

    statistic: Literal["at_equal_flops"]
    metric: Literal["loss", "accuracy"]
    margin: float = Field(default=0.0, ge=0, description="Nats per token (loss); unused for accuracy.")
    flops_tolerance: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Accuracy: the other arm's checkpoint read at F may sit at most this fraction of F below it "
        "(e.g. 0.1); further, the comparison is not at equal FLOPs and the claim is unverifiable (checkpoint more "
        "densely: checkpoint_every). Loss is interpolated between checkpoints and needs none.",
    )
    ADDED_LATER: ClassVar[dict[str, Any]] = {**ClaimSpec.ADDED_LATER, "flops_tolerance": None}


class TrainingStableClaim(ClaimSpec):
    """An arm trained without diverging: every recorded training loss of its lineage (the checkpoint that read
    ``manifest`` and its ancestors) is finite and, in every stage, the mean loss of the stage's last ``window``
    of steps is at most ``margin`` above the mean of its first. Descriptive, with no test: in no family."""

    statistic: Literal["training_stable"]
    arm: KeyName
    versus: KeyName | None = Field(
        default=None,
        description='The arm it is stable where the other is not ("Muon stable where AdamW spikes"): the claim '
        "holds only when ``arm`` keeps every stage and ``versus`` does not. Claim rules 2 need it.",
    )
    window: float = Field(default=0.1, gt=0, le=0.5, description="Fraction of each stage's steps at each end.")
    margin: float = Field(default=0.0, ge=0, description="Nats per token the end may sit above the start.")

    ADDED_LATER: ClassVar[dict[str, Any]] = {**ClaimSpec.ADDED_LATER, "versus": None}

    @model_validator(mode="after")
    def _no_family(self) -> TrainingStableClaim:
        if self.family is not None:
            raise _located("a training_stable claim has no p-value: it can be in no multiplicity family", ["family"])
        return self


for _statistic in (
    StatisticKind(
        "paired_exact",
        PairedExactClaim,
        "ledger.judge.claims:paired_exact",
        "exact McNemar on the discordant pairs",
        tested=True,
        power="ledger.judge.power:paired_best_case",
        compares=True,
    ),
    StatisticKind(
        "accuracy",
        AccuracyClaim,
        "ledger.judge.claims:accuracy",
        "one arm's accuracy against a threshold",
        no_power_check="a proportion against a threshold: any count of rows decides it",
        decided_by="bound",
    ),
    StatisticKind(
        "noninferiority",
        NonInferiorityClaim,
        "ledger.judge.claims:noninferiority",
        "Tango's paired non-inferiority with a margin",
        tested=True,
        power="ledger.judge.power:noninferiority_best_case",
        compares=True,
    ),
    StatisticKind(
        "frontier_ratio",
        FrontierClaim,
        "ledger.judge.claims:frontier_ratio",
        "frontier depth / training support",
        reads="per_depth",
        power="ledger.judge.power:frontier_reach",
        decided_by="run_level",
    ),
    StatisticKind(
        "support_scaling",
        SupportScalingClaim,
        "ledger.judge.support_scaling:support_scaling",
        "frontier / support across training supports: every ratio and their spread",
        reads="per_depth",
        power="ledger.judge.power:support_reach",
        decided_by="run_level",
    ),
    StatisticKind(
        "gate",
        GateClaim,
        "ledger.judge.claims:gate",
        "a recorded gate result",
        reads="gate",
        no_power_check="a recorded pass or fail: the gate's own threshold decides it",
        decided_by="recorded",
    ),
    StatisticKind(
        "persistence",
        PersistenceClaim,
        "ledger.judge.persistence:persistence",
        "active-cell accuracy, or the share of cells above the diagonal that advance or stay",
        reads="cells",
        no_power_check="a share of cells against a threshold: any count of cells decides it",
        decided_by="bound",
    ),
    StatisticKind(
        "paired_loss",
        PairedLossClaim,
        "ledger.judge.language_claims:paired_loss",
        "paired next-token loss of two arms (Wilcoxon signed-rank)",
        reads="losses",
        tested=True,
        power="ledger.judge.power:paired_best_case",
        compares=True,
    ),
    StatisticKind(
        "at_equal_flops",
        EqualFlopsClaim,
        "ledger.judge.language_claims:at_equal_flops",
        "two arms compared at equal training FLOPs (interpolated over recorded checkpoints)",
        reads="curve",
        tested=True,
        power="ledger.judge.power:paired_best_case",
        compares=True,
    ),
    StatisticKind(
        "training_stable",
        TrainingStableClaim,
        "ledger.judge.language_claims:training_stable",
        "an arm's recorded training losses finite, and no stage ending above where it started",
        reads="training",
        no_power_check="descriptive: the recorded losses decide it, with no p-value",
    ),
    StatisticKind(
        "adaptive_depth",
        AdaptiveDepthClaim,
        "ledger.judge.adaptive_depth:adaptive_depth",
        "an exit rule against forced depth on the same rows: the right-depth share or paired non-inferiority, "
        "with the loops it saved",
        reads="exits",
        tested=True,
        power="ledger.judge.power:adaptive_depth_best_case",
        compares=True,
    ),
    StatisticKind(
        "keeps_all",
        KeepsAllClaim,
        "ledger.judge.checkpoint_claims:keeps_all",
        "whether any checkpoint of an arm meets every condition at once (the acquisition-retention boundary)",
        reads="checkpoints",
        no_power_check="descriptive: thresholds over recorded checkpoints, with no p-value",
    ),
    StatisticKind(
        "checkpoint_trend",
        CheckpointTrendClaim,
        "ledger.judge.checkpoint_claims:checkpoint_trend",
        "a measure rises or falls from an arm's first checkpoint to its last (e.g. the mean up, the deep tail down)",
        reads="checkpoints",
        no_power_check="descriptive: the direction of a recorded measure, with no p-value",
    ),
):
    STATISTICS.add(_statistic)
# The type of a claim: whichever spec STATISTICS holds for its ``statistic`` (a plugin's statistics included).
Claim = Annotated[ClaimSpec, KindUnion(STATISTICS, "statistic")]


Correction = Literal["holm", "bonferroni", "none"]


class FamilySpec(StrictModel):
    """A multiplicity family declared in the claim file: its correction and every member, by claim id."""

    correction: Correction
    members: list[KeyName] = Field(min_length=2)


class ClaimFile(StrictModel):
    protocol: KeyName = Field(description="Name of the protocol (or imported release) the claims are about.")
    release: str | None = Field(
        default=None,
        description="Release mapping file (relative to this file) to import before verifying: an external audit.",
    )
    correction: Correction = Field(
        description="Multiplicity correction applied within each family not declared under `families` (always "
        "explicit)."
    )
    families: KeyNameMap[FamilySpec] = Field(
        default_factory=dict,
        description="Families declared with their own correction and members (each member names the family). A "
        "family is judged only when every member is measured: one unmeasured member leaves all unverifiable.",
    )
    rules: Literal[1, 2] = Field(
        default=1,
        description="The claim rules this file is registered and judged under (``ledger.judge.claim_rules``): 2, "
        "the current, for a new file; a file without the field follows rules 1, and verify shows its tally under "
        "rules 2 beside.",
    )
    primary: list[KeyName] = Field(
        default_factory=list,
        description="Rules 2: the primary claim(s), by id, corrected by Holm among themselves; every other "
        "confirmatory claim with a test is corrected by Holm across the whole file.",
    )
    acquisition: KeyNameMap[list[Precondition]] = Field(
        default_factory=dict,
        description="Rules 2: arm -> what shows it learnt its own task (claims of this file by id, or gates "
        "{gate, arm}), for every arm a claim compares (a dense control's depth-1 accuracy, a scratchpad control's "
        "accuracy inside its support, a recurrent arm's installation gate). A comparison whose arm's acquisition is "
        "not met is unverifiable.",
    )
    identical_arms_fail_at_most: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description='Rules 2: a claim on a "within" gate (within_rows, guardrail) is refused when two identical arms '
        "would fail the gate more often than this (default 0.2; ``ledger.judge.gate_power``).",
    )
    claims: list[Claim] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ClaimFile:
        seen: set[str] = set()
        for index, claim in enumerate(self.claims):
            if claim.id in seen:
                raise _located(f"duplicate claim id {claim.id!r}", ["claims", index, "id"])
            seen.add(claim.id)
        self._check_families()
        self._check_preconditions()
        self._check_rules_fields()
        if self.release is None:
            for index, claim in enumerate(self.claims):
                if claim.audited_outcome != "supported":
                    raise _located(
                        "audited_outcome is for external audits (a claim file with `release`): a preregistered claim "
                        "states what it expects to support",
                        ["claims", index, "audited_outcome"],
                    )
        return self

    def _check_preconditions(self) -> None:
        """Each required claim is another claim of this file, and no claim requires itself through others."""
        ids = {claim.id for claim in self.claims}
        for index, claim in enumerate(self.claims):
            for position, required in enumerate(claim.claim_preconditions()):
                if required == claim.id:
                    raise _located("a claim cannot require itself", ["claims", index, "requires", position])
                if required not in ids:
                    raise _located(
                        f"requires {required!r}, not a claim of this file", ["claims", index, "requires", position]
                    )
        needs = {claim.id: claim.claim_preconditions() for claim in self.claims}
        for index, claim in enumerate(self.claims):
            seen, stack = set(), list(needs[claim.id])
            while stack:
                current = stack.pop()
                if current == claim.id:
                    raise _located(
                        f"claim {claim.id!r} requires itself through its preconditions", ["claims", index, "requires"]
                    )
                if current not in seen:
                    seen.add(current)
                    stack.extend(needs.get(current, []))

    def _check_rules_fields(self) -> None:
        """``primary`` and ``acquisition`` name claims of this file (and rules 2, which reads them)."""
        ids = {claim.id for claim in self.claims}
        if self.rules < 2:
            for field in ("primary", "acquisition", "identical_arms_fail_at_most"):
                if getattr(self, field):
                    raise _located(f"{field} is read by claim rules 2: set `rules: 2`", [field])
        for position, name in enumerate(self.primary):
            if name not in ids:
                raise _located(f"{name!r} is not a claim of this file", ["primary", position])
        for arm, preconditions in self.acquisition.items():
            if not preconditions:
                raise _located(
                    "name at least one claim or gate that shows this arm learnt its task", ["acquisition", arm]
                )
            for position, required in enumerate(preconditions):
                if isinstance(required, str) and required not in ids:
                    raise _located(f"{required!r} is not a claim of this file", ["acquisition", arm, position])

    def _check_families(self) -> None:
        named: dict[str, list[str]] = {}
        for index, claim in enumerate(self.claims):
            if claim.family is None:
                continue
            if not STATISTICS[claim.statistic].tested:
                raise _located(
                    f"a {claim.statistic} claim has no p-value: it can be in no multiplicity family",
                    ["claims", index, "family"],
                )
            named.setdefault(claim.family, []).append(claim.id)
        for name, family in self.families.items():
            declared, naming = set(family.members), set(named.get(name, []))
            if declared != naming:
                problems = [
                    f"{m!r} is not a claim of this file naming family {name!r}" for m in sorted(declared - naming)
                ]
                problems += [
                    f"{m!r} names family {name!r} but is not one of its members" for m in sorted(naming - declared)
                ]
                raise _located("; ".join(problems), ["families", name, "members"])


def load_claims(path: str | Path) -> ClaimFile:
    """Read and validate a claim file; located errors as for protocols."""
    return load_model_file(path, ClaimFile, "claim file")


def check_claims_against(claims: ClaimFile, protocol: Protocol, file: str) -> list[ProtocolIssue]:
    """References from claims into the protocol (arms, manifests, gates) that do not resolve."""
    issues: list[ProtocolIssue] = []
    if claims.protocol != protocol.name:
        issues.append(
            ProtocolIssue(file, None, "protocol", f"claims are for {claims.protocol!r}, not {protocol.name!r}")
        )
    arms = {arm.id for arm in protocol.arms} | {arm.replicate.of for arm in protocol.arms if arm.replicate}
    manifests = {spec.id for spec in protocol.manifests}
    gates = {gate.id for gate in protocol.gates}
    for index, claim in enumerate(claims.claims):
        where = f"claims.{index}"
        for manifest in claim_manifests(claim):
            if manifest not in manifests:
                issues.append(ProtocolIssue(file, None, f"{where}.manifest", f"unknown manifest {manifest!r}"))
        named = list(getattr(claim, "arms", ())) + ([claim.arm] if hasattr(claim, "arm") else [])
        versus = getattr(claim, "versus", None)
        named += [versus] if isinstance(versus, str) else []
        for arm in named:
            # A base is read as its own arm, "base:NAME" (the reference of guardrails).
            if arm not in arms and not (arm.startswith("base:") and arm[5:] in protocol.bases):
                issues.append(ProtocolIssue(file, None, where, f"unknown arm {arm!r}"))
        if isinstance(claim, GateClaim) and claim.gate not in gates:
            issues.append(ProtocolIssue(file, None, f"{where}.gate", f"unknown gate {claim.gate!r}"))
        for required in claim.gate_preconditions():
            if required.gate not in gates:
                issues.append(ProtocolIssue(file, None, f"{where}.requires", f"unknown gate {required.gate!r}"))
            if required.arm not in arms:
                issues.append(ProtocolIssue(file, None, f"{where}.requires", f"unknown arm {required.arm!r}"))
    return issues


def claim_subjects(claim: Any) -> tuple[str, ...]:
    """The arms a claim is about (``arms`` or ``arm``; ``base:NAME`` for a base), in the claim's order."""
    arms = getattr(claim, "arms", None)
    if arms:
        return tuple(arms)
    arm = getattr(claim, "arm", None)
    return (arm,) if arm else ()


def manifest_of(claim: Any, arm: str) -> str:
    """The manifest a claim reads ``arm`` on: its ``manifest``, unless the claim names another for that arm."""
    return str(getattr(claim, "manifests", {}).get(arm, claim.manifest))


def claim_manifests(claim: Any) -> tuple[str, ...]:
    """Every manifest a claim reads, its ``manifest`` first."""
    others = [m for m in getattr(claim, "manifests", {}).values() if m != claim.manifest]
    others += [c.manifest for c in getattr(claim, "conditions", ()) if c.manifest != claim.manifest]
    return tuple(dict.fromkeys([claim.manifest, *others]))


def _rebuild_claim_file() -> None:
    ClaimFile.model_rebuild(force=True)


# A statistic registered later (a plugin, a test) joins the union of a claim file's claims.
STATISTICS.on_change(_rebuild_claim_file)
