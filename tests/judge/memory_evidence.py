"""A test double of the evidence interface: outcomes, summaries and gate verdicts held in dicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.store.evidence_source import Cell, EvidenceSource, LoopReading, Outcomes


@dataclass
class MemoryEvidence(EvidenceSource):
    """``outcome_map`` is keyed (arm, manifest, loop), with loop ``("step", n)`` for a checkpoint at step n."""

    outcome_map: Mapping[tuple[str, str, Any], Outcomes] = field(default_factory=dict)
    count_map: Mapping[tuple[str, str], dict[int, tuple[int, int]]] = field(default_factory=dict)
    gates: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    protocol: Mapping[str, dict[str, dict]] = field(default_factory=dict)  # "arms" / "gates" -> id -> spec

    def protocol_part(self, part: str) -> dict[str, dict]:
        return dict(self.protocol.get(part, {}))

    def outcomes(self, arm: str, manifest: str, loop: int | None) -> Outcomes | None:
        return self.outcome_map.get((arm, manifest, loop))

    def outcomes_at(self, arm: str, manifest: str, loop: int, checkpoint: str) -> Outcomes | None:
        return None

    def outcomes_at_step(self, arm: str, manifest: str, step: int) -> tuple[str | None, Outcomes]:
        found = self.outcome_map.get((arm, manifest, ("step", step)))
        return (f"{arm}@{step}", found) if found is not None else (None, {})

    def checkpoint_outcomes(self, arm: str, manifest: str) -> dict[str, tuple[str, Outcomes]]:
        return {}

    def depth_counts(self, arm: str, manifest: str) -> dict[int, tuple[int, int]] | None:
        return self.count_map.get((arm, manifest))

    def gate_passed(self, gate: str, arm: str) -> bool | None:
        return self.gates.get((gate, arm))

    def cells(self, arm: str, manifest: str) -> list[Cell]:
        return []

    def loop_readings(self, arm: str, manifest: str) -> list[LoopReading]:
        return []

    def losses(self, arm: str, manifest: str, loop: int, checkpoint: str | None = None) -> dict | None:
        return None

    def curve(self, arm: str, manifest: str) -> list[tuple[str, float]]:
        return []

    def training_losses(self, arm: str, manifest: str) -> list[tuple[str, list[float]]]:
        return []
