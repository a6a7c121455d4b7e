"""``keeps_all`` claims (``ledger.protocol.checkpoint_claims.py``): every checkpoint of an arm against every condition."""

from __future__ import annotations

from typing import Any

from ledger.judge.claims import ClaimResult, Unverifiable, depth_tally
from ledger.judge.selection import note_rows
from ledger.protocol.checkpoint_claims import CheckpointTrendClaim, KeepsAllClaim
from ledger.store.evidence_source import EvidenceSource


def condition_value(outcomes: dict[str, tuple[int, bool]], measure: str) -> float:
    """Accuracy over the rows, or the lowest per-depth accuracy, of row id -> (depth, correct)."""
    if measure == "accuracy":
        return sum(correct for _, correct in outcomes.values()) / len(outcomes)
    return min(right / n for right, n in depth_tally(outcomes).values())


def keeps_all(claim: KeepsAllClaim, evidence: EvidenceSource) -> ClaimResult:
    per_condition = [evidence.checkpoint_outcomes(claim.arm, c.manifest) for c in claim.conditions]
    shared = set.intersection(*(set(found) for found in per_condition)) if per_condition else set()
    if not shared:
        raise Unverifiable(
            f"no checkpoint of arm {claim.arm!r} read every condition's manifest "
            f"({', '.join(c.manifest for c in claim.conditions)})"
        )
    order = [checkpoint for checkpoint in per_condition[0] if checkpoint in shared]
    table: list[dict[str, Any]] = []
    keeping: list[str] = []
    for checkpoint in order:
        stage, values, holds = "", [], []
        for condition, found in zip(claim.conditions, per_condition):
            stage, outcomes = found[checkpoint]
            value = condition_value(outcomes, condition.measure)
            values.append(value)
            holds.append(value >= condition.at_least)
            note_rows(evidence, claim.arm, condition.manifest, None, list(outcomes), checkpoint=checkpoint)
        table.append({"checkpoint": checkpoint[:12], "stage": stage, "values": values, "keeps_all": all(holds)})
        if all(holds):
            keeping.append(f"{stage} ({checkpoint[:12]})")
    supported = not keeping if claim.expect == "none" else bool(keeping)
    shown = "; ".join(
        f"{row['stage']}: " + ", ".join(f"{v:.3f}" for v in row["values"]) + (" KEEPS ALL" if row["keeps_all"] else "")
        for row in table
    )
    wanted = " and ".join(c.describe() for c in claim.conditions)
    reason = (
        f"{claim.arm}: {len(keeping)} of {len(table)} checkpoints keep all of {wanted}"
        f"{': ' + ', '.join(keeping) if keeping else ''} ({shown}); expected {claim.expect}"
    )
    figures = {"checkpoints": len(table), "keeping": len(keeping), "table": table}
    return ClaimResult(claim.id, claim.statistic, "supported" if supported else "refuted", reason, figures)


def checkpoint_trend(claim: CheckpointTrendClaim, evidence: EvidenceSource) -> ClaimResult:
    found = evidence.checkpoint_outcomes(claim.arm, claim.manifest)
    series: list[tuple[str, str, float]] = []
    for checkpoint, (stage, outcomes) in found.items():
        if claim.rows.depths is not None:
            low, high = claim.rows.depths
            outcomes = {row: value for row, value in outcomes.items() if low <= value[0] <= high}
        if not outcomes:
            continue
        series.append((checkpoint, stage, condition_value(outcomes, claim.measure)))
        note_rows(evidence, claim.arm, claim.manifest, None, list(outcomes), checkpoint=checkpoint)
    if len(series) < 2:
        raise Unverifiable(
            f"arm {claim.arm!r} has {len(series)} checkpoint(s) read on {claim.manifest!r}: a trend needs two"
        )
    first, last = series[0][2], series[-1][2]
    holds = last > first if claim.direction == "rises" else last < first
    what = "accuracy" if claim.measure == "accuracy" else "lowest per-depth accuracy"
    where = "" if claim.rows.depths is None else f" over depths {claim.rows.depths[0]}-{claim.rows.depths[1]}"
    shown = ", ".join(f"{stage or checkpoint[:12]} {value:.4f}" for checkpoint, stage, value in series)
    reason = f"{claim.arm} {what}{where} by checkpoint: {shown}; last - first = {last - first:+.4f}, {claim.direction}?"
    figures = {"first": first, "last": last, "change": last - first, "checkpoints": len(series)}
    figures.update({f"value_{i + 1}": value for i, (_, _, value) in enumerate(series)})
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures)
