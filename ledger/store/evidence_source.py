"""What a statistic reads: the evidence interface every judge is typed against.

``StoreEvidence`` (``ledger.store.evidence``) implements it on a ledger, scoped to the protocol versions that
registered the claims; the tests' in-memory double implements it too. A read that finds nothing returns
``None`` or an empty value, never raises: a claim without its evidence is judged unverifiable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

Outcomes = dict[str, tuple[int, bool]]  # row id -> (depth, correct)


@dataclass(frozen=True)
class Cell:
    """One (row, loop) of an arm's latest checkpoint on a manifest, for persistence claims."""

    row_id: str
    depth: int
    loop: int
    correct: bool | None
    behavior: str | None  # above the diagonal: advance, stay or other, where the evidence labels it


@dataclass(frozen=True)
class LoopReading:
    """One (row, loop) reading with what it recorded (its exit signals and marks), and the row's answer."""

    row_id: str
    depth: int
    loop: int
    prediction: str | None
    answer: str | None
    detail: dict


@dataclass(frozen=True)
class RowsUsed:
    """The rows a statistic computed on, request by request (``ledger.judge.selection``): what verify records
    with its test (``StoreEvidence.evidence_ids`` turns them into evidence ids)."""

    arm: str
    manifest: str
    loop: int | None  # None: each row's final reading
    checkpoint: str | None  # None: the arm's final checkpoint on the manifest
    kind: str  # "outcomes" (right or wrong per row), "losses" (nats and tokens per document) or "cells"
    rows: tuple[str, ...]


class EvidenceSource(ABC):
    """The reads a statistic may make, each of one arm on one manifest (by its name in the protocol)."""

    def protocol_part(self, part: str) -> dict[str, dict]:
        """The registered protocol's ``arms`` or ``gates``, by id, as its canonical document holds them (the
        latest version in scope); empty where the evidence has no protocol (an imported release)."""
        return {}

    def manifest_depths(self, manifest: str) -> list[int]:
        """Each registered row's depth on this manifest (one entry per row; empty where unknown)."""
        return []

    @abstractmethod
    def outcomes(self, arm: str, manifest: str, loop: int | None) -> Outcomes | None:
        """At ``loop`` (None: each row's final reading), by the arm's final checkpoint; None if absent."""

    @abstractmethod
    def outcomes_at(self, arm: str, manifest: str, loop: int, checkpoint: str) -> Outcomes | None:
        """One checkpoint's readings at ``loop``; None if absent."""

    @abstractmethod
    def outcomes_at_step(self, arm: str, manifest: str, step: int) -> tuple[str | None, Outcomes]:
        """(checkpoint, outcomes) of the arm's checkpoint that ends at ``step`` of its stage; (None, {})."""

    @abstractmethod
    def checkpoint_outcomes(self, arm: str, manifest: str) -> dict[str, tuple[str, Outcomes]]:
        """checkpoint -> (its stage, outcomes at each row's final reading), in recording order."""

    @abstractmethod
    def depth_counts(self, arm: str, manifest: str) -> dict[int, tuple[int, int]] | None:
        """Per-depth (correct, total) from an imported summary without rows; None if absent."""

    @abstractmethod
    def gate_passed(self, gate: str, arm: str) -> bool | None:
        """The recorded verdict of ``gate`` on the arm's checkpoint; None if never measured."""

    @abstractmethod
    def cells(self, arm: str, manifest: str) -> list[Cell]:
        """Every (row, loop) reading of the arm's final checkpoint, with its behaviour label."""

    @abstractmethod
    def loop_readings(self, arm: str, manifest: str) -> list[LoopReading]:
        """Every (row, loop) reading of the arm's final checkpoint with its detail and the row's answer."""

    @abstractmethod
    def losses(self, arm: str, manifest: str, loop: int, checkpoint: str | None = None) -> dict | None:
        """row id -> (nats, tokens) at test recurrence ``loop`` (default checkpoint: the final one)."""

    @abstractmethod
    def curve(self, arm: str, manifest: str) -> list[tuple[str, float]]:
        """(checkpoint, training FLOPs of its lineage) of every checkpoint that read the manifest, by FLOPs."""

    @abstractmethod
    def training_losses(self, arm: str, manifest: str) -> list[tuple[str, list[float]]]:
        """(stage, per-step training losses) along the final checkpoint's lineage, oldest first."""
