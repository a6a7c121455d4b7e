"""The rows a claim's statistic used: what the judge read and kept, request by request.

A statistic reads an arm's per-row values and may narrow them (a claim's depth range, the rows
two arms share). What it finally computes on is noted here, so the store can record exactly those
evidence rows with the test (``stat_test_evidence``; view ``v_claim_evidence``), never every reading
of the arms the claim names. Nothing here touches the store: a request names (arm, manifest, loop,
checkpoint) and the row ids kept; ``StoreEvidence.evidence_ids`` turns that into evidence ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledger.store.evidence_source import Cell, EvidenceSource, LoopReading, Outcomes, RowsUsed


class SelectionRecorder(EvidenceSource):
    """An evidence source that passes every read through and keeps what the statistic noted as used."""

    def __init__(self, evidence: EvidenceSource) -> None:
        self._evidence = evidence
        self.used: list[RowsUsed] = []

    def outcomes(self, arm: str, manifest: str, loop: int | None) -> Outcomes | None:
        return self._evidence.outcomes(arm, manifest, loop)

    def outcomes_at(self, arm: str, manifest: str, loop: int, checkpoint: str) -> Outcomes | None:
        return self._evidence.outcomes_at(arm, manifest, loop, checkpoint)

    def outcomes_at_step(self, arm: str, manifest: str, step: int) -> tuple[str | None, Outcomes]:
        return self._evidence.outcomes_at_step(arm, manifest, step)

    def checkpoint_outcomes(self, arm: str, manifest: str) -> dict[str, tuple[str, Outcomes]]:
        return self._evidence.checkpoint_outcomes(arm, manifest)

    def depth_counts(self, arm: str, manifest: str) -> dict[int, tuple[int, int]] | None:
        return self._evidence.depth_counts(arm, manifest)

    def gate_passed(self, gate: str, arm: str) -> bool | None:
        return self._evidence.gate_passed(gate, arm)

    def cells(self, arm: str, manifest: str) -> list[Cell]:
        return self._evidence.cells(arm, manifest)

    def loop_readings(self, arm: str, manifest: str) -> list[LoopReading]:
        return self._evidence.loop_readings(arm, manifest)

    def losses(self, arm: str, manifest: str, loop: int, checkpoint: str | None = None) -> dict | None:
        return self._evidence.losses(arm, manifest, loop, checkpoint)

    def curve(self, arm: str, manifest: str) -> list[tuple[str, float]]:
        return self._evidence.curve(arm, manifest)

    def training_losses(self, arm: str, manifest: str) -> list[tuple[str, list[float]]]:
        return self._evidence.training_losses(arm, manifest)


def note_rows(
    evidence: EvidenceSource,
    arm: str,
    manifest: str,
    loop: int | None,
    rows: Iterable[str],
    *,
    checkpoint: str | None = None,
    kind: str = "outcomes",
) -> None:
    """Record that a statistic computed on these rows (a no-op for a source that records nothing)."""
    if isinstance(evidence, SelectionRecorder):
        evidence.used.append(RowsUsed(arm, manifest, loop, checkpoint, kind, tuple(sorted(rows))))
