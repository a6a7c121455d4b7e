"""Claim rules, by version: what a claim file must declare to be registered, and how its claims are judged.

A claim file names the rules it follows (``rules``; absent: 1). A file is registered and judged under its own
rules for good, so a committed record keeps verifying as it was registered; ``ledger verify`` shows, beside a
file's tally, its tally under the current rules (``CURRENT``), so a reader sees which supports they withdraw.

Rules 1: each claim's own statistic; Holm or Bonferroni within declared families; ``requires`` preconditions;
an acquisition precondition for a claim an arm that learnt nothing would support (``ledger.judge.acquisition``).

Rules 2 add, on top of rules 1's preconditions:

1. **Competent comparators.** Every arm a claim compares (a paired test's, a non-inferiority's, the reference
   of a two-arm gate) names in the file's ``acquisition`` what shows it learnt its own task: a dense direct
   control's depth-1 accuracy, a scratchpad control's accuracy inside its support, a recurrent arm's
   installation gate. When that is not met, the comparison is unverifiable and says which arm and why.
2. **Bounds, not point estimates.** An accuracy or persistence threshold is met only when the one-sided 95%
   Wilson bound clears it (the lower bound for "at least", the upper for "at most").
3. **A primary claim, and multiplicity over the whole file.** ``primary`` names the primary claim(s), corrected
   by Holm among themselves; every other confirmatory claim with a test is corrected by Holm across the file
   (an unmeasured member counts as p = 1, so the family is never smaller than registered). Declared families
   are rules 1's: a rules-2 file declares none.
4. **Gates sized for what they judge.** A claim on a "within" gate (an arm within some rows of a reference at
   every depth, a guardrail's drop) is refused when two identical arms would fail the gate more often than the
   file's ``identical_arms_fail_at_most`` (0.2 by default; ``ledger.judge.gate_power``); a failed gate of an
   older file that identical arms would fail as often is unverifiable, not refuted.
5. **A paper's figure is the claim's.** A claim that carries a paper's figure names its statistic and
   benchmark (``paper: {statistic, benchmark}``); registration refuses, under any rules, a figure of another
   statistic or benchmark than the claim's where both are known.
6. **Exploratory claims are never support.** A claim with neither a test nor a bound (a trend, "stable", a
   keeps-all boundary), a run-level quantity on one training run (a frontier, a frontier/support ratio), and a
   claim marked ``exploratory`` or ``by_construction``, is judged and reported and never counted as support;
   a rules-2 file must mark each such claim ``exploratory`` (or ``by_construction``) itself.

Every step only ever demotes an outcome (supported to refuted or unverifiable, refuted to unverifiable), so
rules 2 applied to the outcomes rules 1 judged is rules 2 applied to the statistics themselves: that is how the
beside tally is drawn. Under any rules, a claim marked ``exploratory`` or ``by_construction`` is never counted,
and the tally counts the claims whose arms depart from the paper's design (a variant) on a line of their own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.judge.claims import ClaimResult
from ledger.judge.intervals import wilson_interval
from ledger.judge.multiplicity import adjust_pvalues
from ledger.protocol.claims import (
    STATISTICS,
    AccuracyClaim,
    ClaimFile,
    FrontierClaim,
    GateClaim,
    PairedExactClaim,
    TrainingStableClaim,
    claim_subjects,
)

CURRENT = 2
BOUND_CONFIDENCE = 0.95  # one-sided: the two-sided 90% Wilson interval's end
NOT_COUNTED_DECISIONS = {
    "descriptive": "descriptive, with neither a test nor a bound",
    "run_level": "a run-level quantity on one training run",
}

GatePassed = Callable[[str, str], "bool | None"]


@dataclass(frozen=True)
class RuleIssue:
    """What registration refuses under a file's rules: ``index`` the claim's (None: the file's ``field``)."""

    claim_id: str
    index: int | None
    message: str
    field: str = ""


def compared_arms(claim: Any, gates: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """The arms a claim compares, each once: a comparison's arms (one arm read two ways is one), or a two-arm
    gate's arm and reference (``gates``: gate id -> its spec, as the protocol holds it). () for a claim about
    one arm alone."""
    if STATISTICS[claim.statistic].compares:
        return tuple(dict.fromkeys(claim_subjects(claim)))
    if isinstance(claim, GateClaim):
        versus = (gates.get(claim.gate) or {}).get("versus")
        return (claim.arm, str(versus)) if versus else ()
    return ()


def not_counted_as_declared(by_construction: str | None, exploratory: bool) -> str | None:
    """Why a claim so declared is never counted as support (None: it is counted)."""
    if by_construction:
        return f"true by construction: {by_construction}"
    return "exploratory" if exploratory else None


def not_counted_by_declaration(claim: Any) -> str | None:
    return not_counted_as_declared(claim.by_construction, claim.exploratory)


def registration_issues(
    claim_file: ClaimFile,
    gates: Mapping[str, Mapping[str, Any]],
    depths_by_manifest: Mapping[str, Sequence[int]] | None = None,
    benchmarks: Mapping[str, str | None] | None = None,
    replicated: Collection[str] = (),
) -> list[RuleIssue]:
    """What registration refuses: a paper's figure on a claim of another statistic or benchmark (every file),
    and what rules 2 refuse in a file that follows them. ``depths_by_manifest``: each manifest's row depths, to
    refuse a threshold whose bound no outcome of its rows could clear; ``benchmarks``: each manifest's benchmark
    (None: its rows are none)."""
    issues = _paper_mismatches(claim_file, benchmarks or {}) + _seed_issues(claim_file, replicated)
    if claim_file.rules < 2:
        return issues
    issues += _unreachable_bounds(claim_file, depths_by_manifest or {})
    for index, claim in enumerate(claim_file.claims):
        if isinstance(claim, TrainingStableClaim) and claim.versus is None:
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    "says an arm is stable without the arm it is compared with: name it (`versus`), so that the "
                    "claim holds only where the other arm diverges",
                )
            )
    for index, claim in enumerate(claim_file.claims):
        noise = _gate_noise(claim_file, claim, gates, (depths_by_manifest or {}).get(_gate_manifest(claim, gates), []))
        if noise is not None:
            issues.append(RuleIssue(claim.id, index, noise))
    for index, claim in enumerate(claim_file.claims):
        if claim.paper is not None and (claim.paper.statistic is None or claim.paper.benchmark is None):
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    "carries a paper's figure without naming its statistic and benchmark (`paper: {statistic, "
                    "benchmark}`): claim rules 2 check that the figure is the claim's",
                )
            )
    by_id = {claim.id: claim for claim in claim_file.claims}
    if not claim_file.primary:
        issues.append(
            RuleIssue("", None, "claim rules 2 need the file's primary claim(s): `primary: [ID, ...]`", "primary")
        )
    for claim_id in claim_file.primary:
        claim = by_id[claim_id]
        if STATISTICS[claim.statistic].decision() != "test" or not_counted_by_declaration(claim):
            issues.append(
                RuleIssue(
                    claim_id,
                    None,
                    f"primary claim {claim_id} must be confirmatory with a test (a p-value), not a "
                    f"{claim.statistic} claim{' marked exploratory' if claim.exploratory else ''}",
                    "primary",
                )
            )
    if claim_file.families:
        issues.append(
            RuleIssue(
                "",
                None,
                "claim rules 2 correct every confirmatory test across the file (Holm; `primary` apart): declare no "
                "families",
                "families",
            )
        )
    for index, claim in enumerate(claim_file.claims):
        if claim.family is not None:
            issues.append(
                RuleIssue(claim.id, index, "names a family: claim rules 2 correct across the whole file instead")
            )
        if _not_counted(claim, replicated) is not None and not_counted_by_declaration(claim) is None:
            decision = STATISTICS[claim.statistic].decision()
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    f"is {NOT_COUNTED_DECISIONS[decision]}: under claim rules 2 it is never support; mark it "
                    "`exploratory: true`",
                )
            )
        for arm in compared_arms(claim, gates):
            if arm not in claim_file.acquisition:
                issues.append(
                    RuleIssue(
                        claim.id,
                        index,
                        f"compares arm {arm}, which declares no acquisition: name in the file's `acquisition` what "
                        f"shows {arm} learnt its own task (a claim of this file, or a gate {{gate, arm}})",
                    )
                )
    for arm, preconditions in claim_file.acquisition.items():
        for required in preconditions:
            shown_by = by_id.get(required) if isinstance(required, str) else None
            if shown_by is not None and compared_arms(shown_by, gates):
                issues.append(
                    RuleIssue(
                        shown_by.id,
                        None,
                        f"acquisition of {arm} names {shown_by.id}, a comparison: an arm shows it learnt its task on "
                        "its own (an accuracy, a one-arm gate)",
                        "acquisition",
                    )
                )
    return issues


def _seed_issues(claim_file: ClaimFile, replicated: Collection[str]) -> list[RuleIssue]:
    """A claim on an arm replicated over seeds that the seeds cannot judge, or a paired test that does not say
    how it combines them (``ledger.judge.seeds``)."""
    issues = []
    for index, claim in enumerate(claim_file.claims):
        named = [arm for arm in claim_subjects(claim) if arm in replicated]
        if not named:
            continue
        if isinstance(claim, PairedExactClaim):
            if claim.seeds is None:
                issues.append(
                    RuleIssue(
                        claim.id,
                        index,
                        f"compares {', '.join(named)}, replicated over seeds: say how the test combines them "
                        "(`seeds: every` or `seeds: pooled`)",
                    )
                )
        elif not isinstance(claim, (AccuracyClaim, FrontierClaim)):
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    f"names {', '.join(named)}, replicated over seeds, and a {claim.statistic} claim is not judged over "
                    "seeds: name one replicate (ARM.sSEED)",
                )
            )
    return issues


def _paper_mismatches(claim_file: ClaimFile, benchmarks: Mapping[str, str | None]) -> list[RuleIssue]:
    """A paper's figure carried by a claim of another statistic, or on another benchmark, where both are known."""
    issues = []
    for index, claim in enumerate(claim_file.claims):
        paper = claim.paper
        if paper is None:
            continue
        if paper.statistic is not None and paper.statistic != claim.statistic:
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    f"is a {claim.statistic} claim carrying the paper's {paper.statistic} figure: a claim carries "
                    "only the paper's figure of its own statistic",
                )
            )
        ours = benchmarks.get(claim.manifest)
        if paper.benchmark is not None and ours is not None and paper.benchmark != ours:
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    f"reads {ours} rows (manifest {claim.manifest}) but carries the paper's figure on {paper.benchmark}: "
                    "a claim carries only the paper's figure on its own benchmark",
                )
            )
    return issues


DEFAULT_IDENTICAL_FAIL = 0.2


def _gate_manifest(claim: Any, gates: Mapping[str, Mapping[str, Any]]) -> str:
    gate = gates.get(claim.gate) if isinstance(claim, GateClaim) else None
    return str((gate or {}).get("manifest", ""))


def _gate_noise(
    claim_file: ClaimFile, claim: Any, gates: Mapping[str, Mapping[str, Any]], depths: Sequence[int]
) -> str | None:
    """Why a claim on a "within" gate measures noise: identical arms would fail the gate more often than the
    file allows (``ledger.judge.gate_power``); None for a gate that passes them, or any other claim."""
    from ledger.judge.gate_power import gate_power

    if not isinstance(claim, GateClaim) or claim.expect != "pass" or claim.gate not in gates:
        return None
    power = gate_power(gates[claim.gate], depths)
    level = claim_file.identical_arms_fail_at_most or DEFAULT_IDENTICAL_FAIL
    if power is None or power.fail <= level:
        return None
    needed = power.rows_for(level)
    scale = (
        f"allow a drop of {needed} of its {power.rows[0]} rows (max_drop {needed / power.rows[0]:.3f})"
        if power.pooled
        else f"allow {needed} rows per depth of {min(power.rows)}-{max(power.rows)}"
    )
    return (
        f"is on gate {claim.gate}, which two identical arms (independent errors, at the worst accuracy) would fail "
        f"{power.fail:.0%} of the time, more than {level:.0%}: its verdict measures noise; {scale}, read more "
        "rows, or state the level (`identical_arms_fail_at_most`)"
    )


def _unreachable_bounds(claim_file: ClaimFile, depths_by_manifest: Mapping[str, Sequence[int]]) -> list[RuleIssue]:
    """A threshold claim whose one-sided bound cannot clear its bar even with every row on its side."""
    from ledger.judge.power import PowerInputs

    inputs = PowerInputs(claim_file, depths_by_manifest)
    issues = []
    for index, claim in enumerate(claim_file.claims):
        if not isinstance(claim, AccuracyClaim):
            continue  # persistence reads cells (rows x loops): sized by its evidence, not by the manifest
        n = len(inputs.depths(claim))
        if n == 0:
            continue
        at_least = claim.direction == "at_least"
        best = wilson_interval(n if at_least else 0, n, confidence=1 - 2 * (1 - BOUND_CONFIDENCE))
        bound = best.lower if at_least else best.upper
        if (bound < claim.threshold) if at_least else (bound > claim.threshold):
            issues.append(
                RuleIssue(
                    claim.id,
                    index,
                    f"cannot be supported: on its {n} rows even {'every' if at_least else 'no'} row right gives a "
                    f"one-sided 95% {'lower' if at_least else 'upper'} bound of {bound:.3f}, "
                    f"{'below' if at_least else 'above'} its threshold {claim.threshold} (claim rules 2 judge the "
                    "bound): read more rows or move the threshold",
                )
            )
    return issues


def judge_under_rules_2(
    claim_file: ClaimFile,
    results: Sequence[ClaimResult],
    gates: Mapping[str, Mapping[str, Any]],
    gate_passed: GatePassed,
    manifest_depths: Callable[[str], Sequence[int]] | None = None,
    replicated: Collection[str] = (),
) -> list[ClaimResult]:
    """Rules 2 applied to a file's results: its statistics' own outcomes (a rules-2 file) or the outcomes rules 1
    judged (the beside view of an older file). Returns new results; ``results`` are left as they were."""
    judged = [copy.deepcopy(result) for result in results]
    claims = {claim.id: claim for claim in claim_file.claims}
    by_id = {result.claim_id: result for result in judged}
    for claim in claim_file.claims:
        result = by_id[claim.id]
        result.not_counted = _not_counted(claim, replicated)
        if STATISTICS[claim.statistic].decision() == "bound":
            _apply_bound(claim, result)
        if isinstance(claim, GateClaim) and manifest_depths is not None and result.outcome == "refuted":
            noise = _gate_noise(claim_file, claim, gates, manifest_depths(_gate_manifest(claim, gates)))
            if noise is not None:  # a failed gate that identical arms fail as often is no evidence against
                result.outcome = "unverifiable"
                result.reason += f"; the gate's fail is not evidence: the claim {noise}"
    _correct_across_file(claim_file, judged)
    _apply_preconditions(claim_file, claims, by_id, gates, gate_passed)
    return judged


def _not_counted(claim: Any, replicated: Collection[str]) -> str | None:
    declared = not_counted_by_declaration(claim)
    if declared is not None:
        return declared
    decision = STATISTICS[claim.statistic].decision()
    if decision == "run_level" and set(claim_subjects(claim)) & set(replicated):
        return None  # judged over training seeds (``ledger.judge.seeds``)
    if decision in NOT_COUNTED_DECISIONS:
        return f"{NOT_COUNTED_DECISIONS[decision]} (exploratory under claim rules 2)"
    return None


def _apply_bound(claim: Any, result: ClaimResult) -> None:
    """An accuracy (``correct``) or persistence (``count``) threshold met by its one-sided 95% bound."""
    hits = result.figures.get("correct", result.figures.get("count"))
    n = result.figures.get("n")
    if result.outcome != "supported" or not isinstance(hits, int) or not isinstance(n, int) or n <= 0:
        return
    interval = wilson_interval(hits, n, confidence=1 - 2 * (1 - BOUND_CONFIDENCE))
    at_least = claim.direction == "at_least"
    bound = interval.lower if at_least else interval.upper
    result.figures["bound_95"] = bound
    if (bound >= claim.threshold) if at_least else (bound <= claim.threshold):
        return
    result.outcome = "refuted"
    side = "lower" if at_least else "upper"
    result.reason += (
        f"; its one-sided 95% {side} bound {bound:.3f} does not clear {claim.threshold} (claim rules 2 judge the "
        "bound, not the point estimate)"
    )


def _p_value(result: ClaimResult) -> float | None:
    value = result.p_value if result.p_value is not None else result.figures.get("p_value")
    return float(value) if isinstance(value, (int, float)) else None


def _correct_across_file(claim_file: ClaimFile, judged: list[ClaimResult]) -> None:
    """Holm among the primary claims, and Holm among every other confirmatory test of the file."""
    claims = {claim.id: claim for claim in claim_file.claims}
    tested = [
        result
        for result in judged
        if STATISTICS[claims[result.claim_id].statistic].decision() == "test" and result.not_counted is None
    ]
    primary = [result for result in tested if result.claim_id in claim_file.primary]
    secondary = [result for result in tested if result.claim_id not in claim_file.primary]
    for members, name in ((primary, "the primary claims"), (secondary, "the file's confirmatory tests")):
        if len(members) < 2:
            continue
        alpha = min(float(getattr(claims[m.claim_id], "alpha", 0.05)) for m in members)
        p_values = [_p_value(m) if m.outcome != "unverifiable" else None for m in members]
        adjusted = adjust_pvalues([1.0 if p is None else p for p in p_values], method="holm", alpha=alpha)
        for member, p_adjusted, reject in zip(members, adjusted.adjusted, adjusted.reject):
            member.figures["p_adjusted_file"] = p_adjusted
            if member.outcome == "supported" and not reject:
                member.outcome = "refuted"
                member.reason += (
                    f"; not significant after Holm over {len(members)} ({name}; claim rules 2): adjusted "
                    f"p = {p_adjusted:.3g}"
                )


def _apply_preconditions(
    claim_file: ClaimFile,
    claims: Mapping[str, Any],
    by_id: Mapping[str, ClaimResult],
    gates: Mapping[str, Mapping[str, Any]],
    gate_passed: GatePassed,
) -> None:
    """``requires`` and each compared arm's ``acquisition``, in an order where every precondition comes first.
    A precondition judged and not met is a result (``preconditions_met`` False: recorded as the claim's first
    outcome); one whose evidence is still missing leaves the claim unverifiable until it is in."""
    settled: set[str] = set()
    final: set[str] = set()  # unverifiable for good: a precondition judged and not met

    def unmet_by(required: Any) -> tuple[str, bool] | None:
        """(why ``required`` is not met, whether only for evidence still missing); None: met."""
        if isinstance(required, str):
            if required not in claims:
                return f"claim {required} is not in the file", False
            settle(required)
            outcome = by_id[required].outcome
            if outcome == "supported":
                return None
            return f"claim {required} is {outcome}", outcome == "unverifiable" and required not in final
        passed = gate_passed(required.gate, required.arm)
        return (
            None
            if passed
            else (f"{required.describe()} {'never recorded' if passed is None else 'failed'}", passed is None)
        )

    def settle(claim_id: str) -> None:
        if claim_id in settled:
            return
        settled.add(claim_id)  # before its preconditions: the file refuses cycles, and this ends any loop
        claim, result = claims[claim_id], by_id[claim_id]
        unmet = [found for required in claim.requires if (found := unmet_by(required)) is not None]
        for arm in compared_arms(claim, gates):
            declared = claim_file.acquisition.get(arm)
            if not declared:
                unmet.append((f"comparator {arm} declares no acquisition (what shows it learnt its own task)", False))
                continue
            missing = [found for required in declared if (found := unmet_by(required)) is not None]
            if missing:
                why = "; ".join(text for text, _ in missing)
                unmet.append(
                    (f"comparator {arm} did not show it learnt its own task: {why}", any(p for _, p in missing))
                )
        if not unmet:
            return
        pending = any(waiting for _, waiting in unmet)
        would_be = result.outcome
        if would_be == "unverifiable" and result.figures.get("preconditions_met") is False:
            final.add(claim_id)  # rules 1 already judged a precondition not met: its reason stands
            return
        if would_be != "unverifiable" and not pending:
            result.figures["preconditions_met"] = False
            final.add(claim_id)
        result.outcome = "unverifiable"
        why = "; ".join(text for text, _ in unmet)
        result.reason = f"precondition not met: {why} (its own statistic: {would_be}; {result.reason})"

    for claim in claim_file.claims:
        settle(claim.id)
