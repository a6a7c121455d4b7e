"""Evidence read back from the store, in the shape claims need (``ledger.store.evidence_source``).

The rule every read here follows: **a claim reads only evidence recorded by runs of the protocol
versions that registered it** (``protocol_sha256s``; an imported release is its own version), **of the
arm it names, by that arm's final checkpoint** on the manifest: the most recently recorded checkpoint
of the arm that those runs read the manifest with (the training curve of design M reads each of its
points, chosen the same way). Another protocol's runs, an exploratory run and a second confirmatory
protocol in the same ledger never change a claim, even where they share its arm names, its manifest's
bytes or (trained identically) its checkpoint's bytes: every read below filters by the runs' protocol.
Manifest names are resolved among those versions' manifests, so two protocols may both call a manifest
``eval``. A claim without a loop reads each row's final reading (``ledger.store.final_reading``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from ledger.store.chain import Store
from ledger.store.evidence_source import Cell, EvidenceSource, LoopReading, RowsUsed
from ledger.store.lookups import EvidenceReading


@dataclass
class StoreEvidence(EvidenceSource):
    """The evidence interface on a ledger, scoped to the protocol versions that registered the claims."""

    store: Store
    protocol_sha256s: tuple[str, ...]
    _manifests: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    # Readings are read once per (arm, manifest[, loop]): the claims of a file share arms, and a judging or
    # verifying pass writes no evidence while it reads (an instance lives for one pass).
    _records: dict[tuple, list[EvidenceReading]] = field(default_factory=dict, init=False, repr=False)
    _outcomes: dict[tuple, dict[str, tuple[int, bool]] | None] = field(default_factory=dict, init=False, repr=False)
    _by_checkpoint: dict[tuple, dict] = field(default_factory=dict, init=False, repr=False)
    _parts: dict[str, dict[str, dict]] = field(default_factory=dict, init=False, repr=False)
    _depths: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)

    def protocol_part(self, part: str) -> dict[str, dict]:
        if part not in self._parts:  # read once a pass: the claim rules, seeds and verify each ask
            registered = self.store.protocols(sha256s=self.protocol_sha256s)
            document = json.loads(registered[-1].canonical_json) if registered else {}
            items = document.get(part) if isinstance(document, dict) else None
            self._parts[part] = {
                str(item["id"]): item for item in items or [] if isinstance(item, dict) and "id" in item
            }
        return self._parts[part]

    def manifest_depths(self, manifest: str) -> list[int]:
        if manifest not in self._depths:
            sha = self.manifest_sha256(manifest)
            rows = self.store.manifest_rows(sha) if sha is not None else []
            self._depths[manifest] = [int(json.loads(row.canonical_json).get("depth") or 0) for row in rows]
        return self._depths[manifest]

    def manifest_sha256(self, manifest: str) -> str | None:
        """The latest registered manifest of that name in scope (a manifest two versions share included);
        resolved once per name, as every read of a claim asks again."""
        if manifest not in self._manifests:
            found = self.store.manifests_of(self.protocol_sha256s, name=manifest)
            self._manifests[manifest] = found[-1].sha256 if found else None
        return self._manifests[manifest]

    def _latest(self, arm: str, manifest: str) -> tuple[str, str] | None:
        """(manifest sha, checkpoint sha) of the arm's latest checkpoint that read the manifest."""
        sha = self.manifest_sha256(manifest)
        if sha is None:
            return None
        checkpoint = self.store.latest_checkpoint_on(arm, sha, self.protocol_sha256s)
        return (sha, checkpoint) if checkpoint is not None else None

    def records(self, arm: str, manifest: str) -> list[EvidenceReading]:
        """The arm's readings of a manifest by its LATEST checkpoint that read it, by row then loop.

        An arm read on the same rows by several checkpoints (a gate after each stage)
        is judged by the last one; earlier readings stay in the ledger for the gates.
        """
        key = (arm, manifest)
        if key not in self._records:
            latest = self._latest(arm, manifest)
            self._records[key] = (
                []
                if latest is None
                else self.store.readings(
                    latest[0],
                    protocol_sha256s=self.protocol_sha256s,
                    arm=arm,
                    checkpoint_sha256=latest[1],
                    in_manifest_order=True,
                )
            )
        return list(self._records[key])

    def outcomes(self, arm: str, manifest: str, loop: int | None) -> dict[str, tuple[int, bool]] | None:
        """row id -> (depth, correct) at ``loop`` (None: each row's final reading); a fresh dict per call."""
        key = (arm, manifest, loop)
        if key not in self._outcomes:
            self._outcomes[key] = self._read_outcomes(arm, manifest, loop)
        found = self._outcomes[key]
        return dict(found) if found is not None else None

    def _read_outcomes(self, arm: str, manifest: str, loop: int | None) -> dict[str, tuple[int, bool]] | None:
        found = {r.row_id: (int(r.depth), bool(r.correct)) for r in self._outcome_readings(arm, manifest, loop)}
        return found or None

    def _outcome_readings(
        self, arm: str, manifest: str, loop: int | None, checkpoint: str | None = None
    ) -> list[EvidenceReading]:
        """The readings a row's outcome comes from (the last per row wins): at ``loop`` (None: each row's final
        reading), by ``checkpoint`` (None: the arm's latest on the manifest). Values and evidence ids both
        come from here, so a recorded selection is exactly what was computed on."""
        sha = self.manifest_sha256(manifest)
        if checkpoint is None:
            latest = self._latest(arm, manifest)
            if latest is None:
                return []
            sha, checkpoint = latest
            if loop is not None:
                return [r for r in self.records(arm, manifest) if r.loop == loop and r.correct is not None]
        if sha is None:
            return []
        if loop is None:
            return self.store.final_readings(
                sha, protocol_sha256s=self.protocol_sha256s, arm=arm, checkpoint_sha256=checkpoint
            )
        readings = self.store.readings(
            sha, protocol_sha256s=self.protocol_sha256s, arm=arm, checkpoint_sha256=checkpoint, loop=loop
        )
        return [r for r in readings if r.correct is not None]

    def evidence_ids(self, used: Iterable[RowsUsed]) -> list[int]:
        """The evidence ids behind the rows a claim's statistic noted as used (``ledger.judge.selection``)."""
        ids: set[int] = set()
        for part in used:
            if part.kind == "losses":
                sha = self.manifest_sha256(part.manifest)
                checkpoint = part.checkpoint or (self._latest(part.arm, part.manifest) or (None, None))[1]
                if sha is None or checkpoint is None or part.loop is None:
                    continue
                by_row = self.store.measured_loss_ids(
                    sha,
                    arm=part.arm,
                    checkpoint_sha256=checkpoint,
                    loop=part.loop,
                    protocol_sha256s=self.protocol_sha256s,
                )
            elif part.kind == "cells":
                by_row = {r.row_id: r.id for r in self.records(part.arm, part.manifest) if r.loop == part.loop}
            else:
                readings = self._outcome_readings(part.arm, part.manifest, part.loop, part.checkpoint)
                by_row = {reading.row_id: reading.id for reading in readings}
            ids.update(by_row[row] for row in part.rows if row in by_row)
        return sorted(ids)

    def cells(self, arm: str, manifest: str) -> list[Cell]:
        """Every (row, loop) reading of the arm's latest checkpoint on the manifest, with its label."""
        readings = self.records(arm, manifest)
        details = self.store.evidence_details(reading.id for reading in readings)
        return [
            Cell(
                reading.row_id,
                int(reading.depth),
                int(reading.loop),
                None if reading.correct is None else bool(reading.correct),
                details.get(reading.id, {}).get("behavior"),
            )
            for reading in readings
        ]

    def loop_readings(self, arm: str, manifest: str) -> list[LoopReading]:
        """Every (row, loop) reading of the arm's latest checkpoint on the manifest with its detail and the row's
        answer (from the registered manifest's rows), for choosing-depth claims."""
        readings = self.records(arm, manifest)
        sha = self.manifest_sha256(manifest)
        if not readings or sha is None:
            return []
        answers = {row.row_id: json.loads(row.canonical_json).get("answer") for row in self.store.manifest_rows(sha)}
        details = self.store.evidence_details(reading.id for reading in readings)
        return [
            LoopReading(r.row_id, int(r.depth), int(r.loop), r.prediction, answers.get(r.row_id), details.get(r.id, {}))
            for r in readings
        ]

    def depth_counts(self, arm: str, manifest: str) -> dict[int, tuple[int, int]] | None:
        """The latest imported per-depth summary of the arm on that manifest id, in scope."""
        for summary in reversed(self.store.external_counts()):
            if summary.protocol_sha256 in self.protocol_sha256s and summary.manifest == manifest and summary.arm == arm:
                return summary.counts
        return None

    def gate_passed(self, gate: str, arm: str) -> bool | None:
        return self.store.latest_gate_verdict(gate, arm, self.protocol_sha256s)

    def checkpoints_used(self, arm: str, manifest: str) -> set[str]:
        """The checkpoints a claim on (arm, manifest) may read: the latest, and every point of a training curve."""
        latest = self._latest(arm, manifest)
        curve = {checkpoint for checkpoint, _ in self.curve(arm, manifest)}
        return ({latest[1]} | curve) if latest is not None else set()

    # -- design M: losses, and the training curve

    def losses(self, arm: str, manifest: str, loop: int, checkpoint: str | None = None) -> dict | None:
        """row id -> (nats, tokens) at test recurrence ``loop``, read by ``checkpoint`` (default: the latest)."""
        sha = self.manifest_sha256(manifest)
        if sha is None:
            return None
        checkpoint = checkpoint or self.store.latest_checkpoint_on(arm, sha, self.protocol_sha256s)
        if checkpoint is None:
            return None
        found = self.store.measured_losses(
            sha, arm=arm, checkpoint_sha256=checkpoint, loop=loop, protocol_sha256s=self.protocol_sha256s
        )
        return found or None

    def curve(self, arm: str, manifest: str) -> list[tuple[str, float]]:
        """(checkpoint, training FLOPs of its lineage) of every checkpoint of the arm that read the manifest,
        by FLOPs; checkpoints without a FLOPs record are left out."""
        sha = self.manifest_sha256(manifest)
        if sha is None:
            return []
        checkpoints = self.store.checkpoints_on(arm, sha, self.protocol_sha256s)
        meta = self.store.checkpoint_meta(checkpoints)
        points = [(c, float(meta[c]["flops_total"])) for c in checkpoints if "flops_total" in meta.get(c, {})]
        return sorted(points, key=lambda point: point[1])

    def checkpoint_outcomes(self, arm: str, manifest: str) -> dict[str, tuple[str, dict[str, tuple[int, bool]]]]:
        """checkpoint -> (its stage, row id -> (depth, correct) at each row's final reading), for every checkpoint
        of the arm that read the manifest, in recording order (a lineage's stages, read by their gates); read once
        per pass (the claims of a file share them), a fresh dict per call."""
        key = (arm, manifest)
        if key not in self._by_checkpoint:
            self._by_checkpoint[key] = self._read_checkpoint_outcomes(arm, manifest)
        return dict(self._by_checkpoint[key])

    def _read_checkpoint_outcomes(self, arm: str, manifest: str) -> dict[str, tuple[str, dict[str, tuple[int, bool]]]]:
        sha = self.manifest_sha256(manifest)
        if sha is None:
            return {}
        shas = self.store.checkpoints_on(arm, sha, self.protocol_sha256s)
        stages = {c.sha256: str(c.stage or "") for c in self.store.checkpoints(shas)}
        found: dict[str, tuple[str, dict[str, tuple[int, bool]]]] = {}
        for checkpoint in shas:
            readings = self._outcome_readings(arm, manifest, None, checkpoint)
            if readings:
                found[checkpoint] = (
                    stages.get(checkpoint, ""),
                    {r.row_id: (int(r.depth), bool(r.correct)) for r in readings},
                )
        return found

    def outcomes_at_step(self, arm: str, manifest: str, step: int) -> tuple[str | None, dict[str, tuple[int, bool]]]:
        """(checkpoint, row id -> (depth, correct)) of the arm's last-recorded checkpoint that ends at ``step`` of
        its stage (its training record's step range) and read the manifest; (None, {}) if there is none."""
        found = self.checkpoint_outcomes(arm, manifest)
        meta = self.store.checkpoint_meta(found)
        at = [c for c in found if (meta.get(c, {}).get("step_range") or [None, None])[1] == step]
        return (at[-1], found[at[-1]][1]) if at else (None, {})

    def outcomes_at(self, arm: str, manifest: str, loop: int, checkpoint: str) -> dict[str, tuple[int, bool]] | None:
        """row id -> (depth, correct) of one checkpoint's readings at ``loop``."""
        readings = self._outcome_readings(arm, manifest, loop, checkpoint)
        return {r.row_id: (int(r.depth), bool(r.correct)) for r in readings} or None

    def training_losses(self, arm: str, manifest: str) -> list[tuple[str, list[float]]]:
        """(stage, per-step training losses) of the lineage of the arm's latest checkpoint that read the
        manifest, oldest first; a stage's intermediate checkpoints (``stage@step``) are joined into one."""
        latest = self._latest(arm, manifest)
        if latest is None:
            return []
        lineage = list(reversed(self.store.lineage(latest[1])))  # the oldest ancestor first
        meta = self.store.checkpoint_meta(row["ancestor_sha256"] for row in lineage)
        stages: list[tuple[str, list[float]]] = []
        for row in lineage:
            losses = meta.get(row["ancestor_sha256"], {}).get("losses")
            if not losses:
                continue  # the base, or a checkpoint without a training record
            stage = str(row["ancestor_stage"]).split("@")[0]
            if stages and stages[-1][0] == stage:
                stages[-1][1].extend(float(loss) for loss in losses)
            else:
                stages.append((stage, [float(loss) for loss in losses]))
        return stages
