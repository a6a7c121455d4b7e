"""A whole claim file: every claim recomputed, each multiplicity family corrected over all its members, then each
claim's preconditions applied (a claim whose precondition is not met is unverifiable)."""

from __future__ import annotations

from ledger.judge import stats
from ledger.judge.claims import FAMILY_FIGURES, ClaimResult, check_reported, evaluate_claim, format_p
from ledger.protocol.claims import ClaimFile
from ledger.store.evidence_source import EvidenceSource


def evaluate_claims(claim_file: ClaimFile, evidence: EvidenceSource) -> list[ClaimResult]:
    """Every claim of a file judged under the file's claim rules (``ledger.judge.claim_rules``)."""
    return evaluate_claims_beside(claim_file, evidence)[0]


def evaluate_claims_beside(
    claim_file: ClaimFile, evidence: EvidenceSource
) -> tuple[list[ClaimResult], list[ClaimResult]]:
    """(under the file's own rules, under the current rules): each statistic computed once. Rules 1: each family
    corrected over all its members (``correct_families``), then the preconditions (``apply_preconditions``)."""
    from ledger.judge.claim_rules import judge_under_rules_2, not_counted_by_declaration
    from ledger.judge.seeds import judge_seeded, replicates_by_arm

    replicates = replicates_by_arm(evidence)
    raw = [
        judge_seeded(claim, evidence, evaluate_claim, replicates) or evaluate_claim(claim, evidence)
        for claim in claim_file.claims
    ]
    for claim, result in zip(claim_file.claims, raw):
        result.family = claim.family
    gates = evidence.protocol_part("gates")
    current = judge_under_rules_2(
        claim_file, raw, gates, evidence.gate_passed, evidence.manifest_depths, replicated=set(replicates)
    )
    if claim_file.rules >= 2:
        return current, current
    own = apply_preconditions(claim_file, correct_families(claim_file, raw), evidence)
    for claim, result in zip(claim_file.claims, own):  # a declaration holds under any rules
        result.not_counted = not_counted_by_declaration(claim)
    return own, current


def apply_preconditions(
    claim_file: ClaimFile, results: list[ClaimResult], evidence: EvidenceSource
) -> list[ClaimResult]:
    """A claim whose precondition is not met is unverifiable, whatever its own statistic says.

    A required claim is met when its outcome, after its own preconditions, is supported; a required gate when it
    passed for its arm. Claims are settled in an order where every precondition comes first (the file refuses
    cycles). Families were corrected before: the claim's p-value stays a member of its family, but the claim
    itself is not judged, so that "C falls beyond its support" is never supported by a C that learnt nothing.
    """
    by_id = {result.claim_id: result for result in results}
    claims = {claim.id: claim for claim in claim_file.claims}
    settled: set[str] = set()
    final: set[str] = set()  # unverifiable for good: judged, and a precondition judged and not met

    def settle(claim_id: str) -> None:
        if claim_id in settled:
            return
        claim = claims[claim_id]
        unmet, pending = [], False
        for required in claim.claim_preconditions():
            settle(required)
            outcome = by_id[required].outcome
            if outcome != "supported":
                unmet.append(f"claim {required} is {outcome}")
                pending = pending or (outcome == "unverifiable" and required not in final)
        for gate in claim.gate_preconditions():
            passed = evidence.gate_passed(gate.gate, gate.arm)
            if not passed:
                unmet.append(f"{gate.describe()} {'never recorded' if passed is None else 'failed'}")
                pending = pending or passed is None
        result = by_id[claim_id]
        settled.add(claim_id)
        if not unmet:
            if claim.requires:
                result.figures["preconditions_met"] = True
            return
        would_be = result.outcome
        if would_be != "unverifiable" and not pending:  # a result, not evidence still missing
            result.figures["preconditions_met"] = False
            final.add(claim_id)
        result.outcome = "unverifiable"
        result.reason = f"precondition not met: {'; '.join(unmet)} (its own statistic: {would_be}; {result.reason})"

    for claim in claim_file.claims:
        settle(claim.id)
    return results


def correct_families(claim_file: ClaimFile, results: list[ClaimResult]) -> list[ClaimResult]:
    """The multiplicity correction of each family over every member the file holds, never fewer.

    A family's correction is its own where the file declares it (``families``), else the file's. A family
    is judged only when every member is measured: while one is unverifiable (an arm not run yet), every
    member is unverifiable, so that no outcome is recorded against a smaller family than preregistered.
    """
    families: dict[str, list[ClaimResult]] = {}
    for result in results:
        if result.family:
            families.setdefault(result.family, []).append(result)
    for family, members in families.items():
        declared = claim_file.families.get(family)
        correction = declared.correction if declared is not None else claim_file.correction
        unmeasured = [m.claim_id for m in members if m.outcome == "unverifiable" or m.p_value is None]
        if unmeasured:
            for member in members:
                if member.claim_id in unmeasured:
                    continue
                member.outcome = "unverifiable"
                member.reason += (
                    f"; family {family!r} is judged only when all {len(members)} members are measured "
                    f"(unmeasured: {', '.join(unmeasured)})"
                )
            continue
        if correction == "none" or len(members) < 2:
            continue
        # Each claim keeps its own alpha; the family is corrected at the smallest one (conservative).
        alpha = min(member.alpha for member in members if member.alpha is not None)
        p_values = [member.p_value for member in members if member.p_value is not None]  # all: none unmeasured
        adjusted = stats.adjust_pvalues(p_values, method=correction, alpha=alpha)
        for member, p_adjusted, reject in zip(members, adjusted.adjusted, adjusted.reject):
            member.figures["p_adjusted"] = p_adjusted
            member.figures["correction"] = f"{correction} over {len(members)} in family {family!r}"
            if member.outcome == "supported" and not reject:
                member.outcome = "refuted"
                member.reason += f"; not significant after {correction} (adjusted p = {p_adjusted:.3g})"
            else:
                member.reason += f"; {correction}-adjusted p = {format_p(p_adjusted)}"
    by_id = {claim.id: claim for claim in claim_file.claims}
    for result in results:  # a reported adjusted p, once the family is corrected
        claim = by_id.get(result.claim_id)
        if claim is not None and "p_adjusted" in result.figures:
            check_reported(claim, result, sorted(set(claim.reported) & FAMILY_FIGURES))
    return results
