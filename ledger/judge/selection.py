"""The rows a claim's statistic used: what the judge read and kept, request by request.

A statistic reads an arm's per-row values and may narrow them (a claim's depth range, the rows
two arms share). What it finally computes on is noted here, so the store can record exactly those
evidence rows with the test (``stat_test_evidence``; view ``v_claim_evidence``), never every reading
of the arms the claim names. Nothing here touches the store: a request names (arm, manifest, loop,
checkpoint) and the row ids kept; ``StoreEvidence.evidence_ids`` turns that into evidence ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RowsUsed:
    arm: str
    manifest: str
    loop: int | None  # None: each row's final reading
    checkpoint: str | None  # None: the arm's final checkpoint on the manifest
    kind: str  # "outcomes" (right or wrong per row) or "losses" (nats and tokens per document)
    rows: tuple[str, ...]


class SelectionRecorder:
    """An evidence source that passes every read through and keeps what the statistic noted as used."""

    def __init__(self, evidence: Any) -> None:
        self._evidence = evidence
        self.used: list[RowsUsed] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._evidence, name)


def note_rows(
    evidence: Any,
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
