"""Persistence claims: what a recurrent arm's state does when a row is run past its depth (docs/science.md, design S).

After the outcome-only anneal, rows of depth 1-k run to K loops. A cell is one (row, loop): **active** where
loop <= depth (right when the state is the loop's intermediate symbol, the t-th hop), **above the diagonal**
where depth < loop, labelled **advance** (the rule applied once more: the symbol ``loop`` hops from the
start), **stay** (still the answer) or other. The evidence source gives each cell (``cells``): its depth,
loop, whether an active cell is right, and the label of a cell above the diagonal.
"""

from __future__ import annotations

from ledger.judge import stats
from ledger.judge.claims import ClaimResult, Unverifiable
from ledger.judge.selection import note_rows
from ledger.protocol.claims import PersistenceClaim
from ledger.store.evidence_source import EvidenceSource


def persistence(claim: PersistenceClaim, evidence: EvidenceSource) -> ClaimResult:
    cells = evidence.cells(claim.arm, claim.manifest)
    if not cells:
        raise Unverifiable(f"no cells of arm {claim.arm!r} on manifest {claim.manifest!r}")
    if claim.rows.depths is not None:
        low, high = claim.rows.depths
        cells = [cell for cell in cells if low <= cell.depth <= high]
    if claim.cells == "active":
        counted = [cell for cell in cells if 1 <= cell.loop <= cell.depth and cell.correct is not None]
        hits = [cell for cell in counted if cell.correct]
        what = "active cells (loop <= depth) in the loop's intermediate state"
    else:
        counted = [cell for cell in cells if cell.loop > cell.depth]
        unlabelled = [cell for cell in counted if cell.behavior is None]
        if unlabelled:
            cell = unlabelled[0]
            raise Unverifiable(
                f"{len(unlabelled)} cells above the diagonal carry no advance / stay label (e.g. row {cell.row_id!r} "
                f"at loop {cell.loop})"
            )
        hits = [cell for cell in counted if cell.behavior == claim.cells]
        what = f"cells above the diagonal that {claim.cells}"
    if not counted:
        raise Unverifiable(f"arm {claim.arm!r} has no {what.split(' that ')[0]} on {claim.manifest!r}")
    for loop in sorted({cell.loop for cell in counted}):
        note_rows(
            evidence, claim.arm, claim.manifest, loop, [c.row_id for c in counted if c.loop == loop], kind="cells"
        )
    n, count = len(counted), len(hits)
    interval = stats.wilson_interval(count, n)
    rate = count / n
    holds = rate >= claim.threshold if claim.direction == "at_least" else rate <= claim.threshold
    sign = ">=" if claim.direction == "at_least" else "<="
    figures = {
        "count": count,
        "n": n,
        "rate": rate,
        "wilson_low": interval.lower,
        "wilson_high": interval.upper,
        "cells": claim.cells,
    }
    reason = (
        f"{claim.arm}: {count}/{n} {what} = {rate:.4f} (Wilson 95% {interval.lower:.3f}-{interval.upper:.3f}); "
        f"needs {sign} {claim.threshold}"
    )
    return ClaimResult(claim.id, claim.statistic, "supported" if holds else "refuted", reason, figures)
