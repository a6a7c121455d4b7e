"""Reads of the evidence: an arm's readings of a manifest's rows, and the final reading of each row.

Every reading comes with its row's depth. Scope filters (protocols through the run that
recorded the reading, an arm, a checkpoint, a run) apply before the final reading is
chosen, so a final reading is the final one among the readings in scope.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, Select, cast, exists, func, select

from ledger.store.base import Database
from ledger.store.final_reading import choose_final, final_candidate_sql
from ledger.store.models import table


@dataclass(frozen=True)
class EvidenceReading:
    id: int
    run_id: str
    arm: str
    checkpoint_sha256: str
    manifest_sha256: str
    row_id: str
    depth: int
    loop: int
    prediction: str | None
    correct: bool | None
    latency_ms: float | None
    tokens_generated: int | None
    entry_seq: int


@dataclass(frozen=True)
class RowRead:
    """A row that some run of a protocol version has evidence on."""

    protocol_sha256: str | None
    manifest_sha256: str
    row_id: str


@dataclass(frozen=True)
class VersionReadings:
    """How much one protocol version's runs read of one manifest."""

    protocol_sha256: str | None
    manifest_sha256: str
    readings: int
    rows: int


@dataclass(frozen=True)
class EvidenceContent:
    """The deterministic content of one reading (no latency); ``correct`` as 0/1 on every backend."""

    arm: str
    checkpoint_sha256: str
    correct: int | None
    loop: int
    manifest_sha256: str
    prediction: str | None
    row_id: str
    tokens_generated: int | None


@dataclass(frozen=True)
class ExternalCounts:
    """An ``external_counts`` chain entry: a release's per-depth (correct, total) without rows."""

    seq: int
    protocol_sha256: str
    manifest: str
    arm: str
    counts: dict[int, tuple[int, int]]


class EvidenceReads:
    """Readings and measured losses, and what they were read by."""

    def __init__(self, db: Database):
        self.db = db

    def readings(
        self,
        manifest_sha256: str,
        *,
        protocol_sha256s: Iterable[str] | None = None,
        arm: str | None = None,
        checkpoint_sha256: str | None = None,
        run_id: str | None = None,
        loop: int | None = None,
        in_manifest_order: bool = False,
    ) -> list[EvidenceReading]:
        """Readings of one manifest, in recording order (or by row position, then loop)."""
        stmt = self._reading_select(manifest_sha256, protocol_sha256s, arm, checkpoint_sha256, run_id)
        e, r = table("evidence"), table("rows")
        if loop is not None:
            stmt = stmt.where(e.c.loop == loop)
        stmt = stmt.order_by(r.c.position, e.c.loop, e.c.id) if in_manifest_order else stmt.order_by(e.c.id)
        return self.db.records(stmt, EvidenceReading)

    def final_readings(
        self,
        manifest_sha256: str,
        *,
        protocol_sha256s: Iterable[str] | None = None,
        arm: str | None = None,
        checkpoint_sha256: str | None = None,
        run_id: str | None = None,
    ) -> list[EvidenceReading]:
        """The final reading (``ledger.store.final_reading``) of each row per (arm, checkpoint), in recording order."""
        e, r = table("evidence"), table("rows")
        stmt = self._reading_select(manifest_sha256, protocol_sha256s, arm, checkpoint_sha256, run_id)
        stmt = stmt.where(final_candidate_sql(r.c.depth, e.c.loop, e.c.correct)).order_by(e.c.id)
        by_series: dict[tuple[str, str], list[EvidenceReading]] = {}
        for reading in self.db.records(stmt, EvidenceReading):
            by_series.setdefault((reading.arm, reading.checkpoint_sha256), []).append(reading)
        chosen = [final for series in by_series.values() for final in choose_final(series).values()]
        return sorted(chosen, key=lambda reading: reading.id)

    def _reading_select(self, manifest_sha256, protocol_sha256s, arm, checkpoint_sha256, run_id) -> Select:
        e, r, u = table("evidence"), table("rows"), table("runs")
        stmt = (
            select(
                e.c.id,
                e.c.run_id,
                e.c.arm,
                e.c.checkpoint_sha256,
                e.c.manifest_sha256,
                e.c.row_id,
                r.c.depth,
                e.c.loop,
                e.c.prediction,
                e.c.correct,
                e.c.latency_ms,
                e.c.tokens_generated,
                e.c.entry_seq,
            )
            .join(r, (r.c.manifest_sha256 == e.c.manifest_sha256) & (r.c.row_id == e.c.row_id))
            .where(e.c.manifest_sha256 == manifest_sha256)
        )
        if protocol_sha256s is not None:
            stmt = stmt.join(u, u.c.run_id == e.c.run_id).where(u.c.protocol_sha256.in_(list(protocol_sha256s)))
        for column, value in (("arm", arm), ("checkpoint_sha256", checkpoint_sha256), ("run_id", run_id)):
            if value is not None:
                stmt = stmt.where(e.c[column] == value)
        return stmt

    def has_evidence(self, run_id: str, manifest_sha256: str, checkpoint_sha256: str | None = None) -> bool:
        """Whether the run recorded any reading of the manifest (by this checkpoint, if given)."""
        e = table("evidence")
        stmt = select(e.c.id).where(e.c.run_id == run_id, e.c.manifest_sha256 == manifest_sha256)
        if checkpoint_sha256 is not None:
            stmt = stmt.where(e.c.checkpoint_sha256 == checkpoint_sha256)
        with self.db.read() as conn:
            return conn.execute(stmt.limit(1)).first() is not None

    def evidence_count_of(self, protocol_sha256s: Iterable[str]) -> int:
        """How many readings runs of these protocol versions have recorded."""
        e, u = table("evidence"), table("runs")
        stmt = (
            select(func.count())
            .select_from(e)
            .join(u, u.c.run_id == e.c.run_id)
            .where(u.c.protocol_sha256.in_(list(protocol_sha256s)))
        )
        with self.db.read() as conn:
            return int(conn.execute(stmt).scalar_one())

    @staticmethod
    def _read_by(e: Any, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None) -> list:
        """Evidence of the arm on the manifest, written by runs of these protocol versions (any, if None):
        two versions of one protocol share arm names and often manifests, and each claim reads its own."""
        where = [e.c.arm == arm, e.c.manifest_sha256 == manifest_sha256]
        if protocol_sha256s is not None:
            u = table("runs")
            where.append(e.c.run_id.in_(select(u.c.run_id).where(u.c.protocol_sha256.in_(list(protocol_sha256s)))))
        return where

    @classmethod
    def _has_readings(
        cls, e: Any, c: Any, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None
    ) -> Any:
        """The checkpoint has a reading of the manifest by the arm: an EXISTS per checkpoint that the
        (checkpoint, arm, loop) index answers, not a join that scans every reading of the arm."""
        return exists().where(
            e.c.checkpoint_sha256 == c.c.sha256, *cls._read_by(e, arm, manifest_sha256, protocol_sha256s)
        )

    def latest_checkpoint_on(
        self, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None = None
    ) -> str | None:
        """The arm's most recently recorded checkpoint with readings of the manifest (by these protocols' runs)."""
        e, c = table("evidence"), table("checkpoints")
        stmt = (
            select(c.c.sha256)
            .where(self._has_readings(e, c, arm, manifest_sha256, protocol_sha256s))
            .order_by(c.c.id.desc())
            .limit(1)
        )
        with self.db.read() as conn:
            return conn.execute(stmt).scalar()

    def checkpoints_on(
        self, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None = None
    ) -> list[str]:
        """Every checkpoint of the arm with readings of the manifest (by these protocols' runs), in recording
        order (a training curve)."""
        e, c = table("evidence"), table("checkpoints")
        stmt = (
            select(c.c.sha256).where(self._has_readings(e, c, arm, manifest_sha256, protocol_sha256s)).order_by(c.c.id)
        )
        with self.db.read() as conn:
            return list(conn.execute(stmt).scalars())

    def measured_losses(
        self,
        manifest_sha256: str,
        *,
        arm: str,
        checkpoint_sha256: str,
        loop: int,
        protocol_sha256s: Iterable[str] | None = None,
    ) -> dict[str, tuple[float, int]]:
        """row id -> (nats, tokens) of a text manifest read by one checkpoint at one test recurrence (by runs
        of these protocol versions, if given)."""
        found = self._measured(manifest_sha256, arm, checkpoint_sha256, loop, protocol_sha256s)
        return {row_id: (nats, tokens) for row_id, (_, nats, tokens) in found.items()}

    def measured_loss_ids(
        self,
        manifest_sha256: str,
        *,
        arm: str,
        checkpoint_sha256: str,
        loop: int,
        protocol_sha256s: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """row id -> the evidence id ``measured_losses`` read that row's (nats, tokens) from."""
        found = self._measured(manifest_sha256, arm, checkpoint_sha256, loop, protocol_sha256s)
        return {row_id: evidence_id for row_id, (evidence_id, _, _) in found.items()}

    def _measured(self, manifest_sha256, arm, checkpoint_sha256, loop, protocol_sha256s) -> dict:
        e = table("evidence")
        stmt = select(e.c.id, e.c.row_id, e.c.detail_json).where(
            *self._read_by(e, arm, manifest_sha256, protocol_sha256s),
            e.c.checkpoint_sha256 == checkpoint_sha256,
            e.c.loop == loop,
        )
        found = {}
        with self.db.read() as conn:
            for evidence_id, row_id, detail in conn.execute(stmt.order_by(e.c.id)):
                measured = json.loads(detail) if detail else {}
                if "nats" in measured and "tokens" in measured:
                    found[row_id] = (int(evidence_id), float(measured["nats"]), int(measured["tokens"]))
        return found

    def evidence_details(self, evidence_ids: Iterable[int]) -> dict[int, dict]:
        """evidence id -> its ``detail_json`` parsed (readings without one are left out)."""
        e = table("evidence")
        ids = sorted(set(evidence_ids))
        found: dict[int, dict] = {}
        with self.db.read() as conn:
            for start in range(0, len(ids), 500):  # within every backend's bound-parameter limit
                stmt = select(e.c.id, e.c.detail_json).where(e.c.id.in_(ids[start : start + 500]))
                for evidence_id, detail in conn.execute(stmt):
                    if detail:
                        found[int(evidence_id)] = json.loads(detail)
        return found

    def rows_read(self) -> list[RowRead]:
        """Every (protocol version, manifest, row) some run has evidence on, imported releases included."""
        e, u = table("evidence"), table("runs")
        stmt = (
            select(u.c.protocol_sha256, e.c.manifest_sha256, e.c.row_id)
            .select_from(e)
            .join(u, u.c.run_id == e.c.run_id)
            .distinct()
        )
        return self.db.records(stmt, RowRead)

    def readings_by_version(self, protocol_sha256s: Iterable[str]) -> list[VersionReadings]:
        """Per protocol version and manifest: the readings its runs recorded and the distinct rows they read."""
        e, u = table("evidence"), table("runs")
        stmt = (
            select(
                u.c.protocol_sha256,
                e.c.manifest_sha256,
                func.count().label("readings"),
                func.count(e.c.row_id.distinct()).label("rows"),
            )
            .select_from(e)
            .join(u, u.c.run_id == e.c.run_id)
            .where(u.c.protocol_sha256.in_(list(protocol_sha256s)))
            .group_by(u.c.protocol_sha256, e.c.manifest_sha256)
            .order_by(u.c.protocol_sha256, e.c.manifest_sha256)
        )
        return self.db.records(stmt, VersionReadings)

    def evidence_contents(self, protocol_sha256: str) -> list[EvidenceContent]:
        """A protocol's readings without latency, in a fixed order (what reruns must reproduce).

        Sorted here, not by SQL: a server's collation (PostgreSQL's locale) may order text
        differently from SQLite's byte order; Python's code-point order is SQLite's, on every
        backend. Ties keep recording order.
        """
        e, u = table("evidence"), table("runs")
        stmt = (
            select(
                e.c.arm,
                e.c.checkpoint_sha256,
                cast(e.c.correct, Integer).label("correct"),
                e.c.loop,
                e.c.manifest_sha256,
                e.c.prediction,
                e.c.row_id,
                e.c.tokens_generated,
            )
            .join(u, u.c.run_id == e.c.run_id)
            .where(u.c.protocol_sha256 == protocol_sha256)
            .order_by(e.c.id)
        )
        return sorted(
            self.db.records(stmt, EvidenceContent),
            key=lambda c: (c.arm, c.manifest_sha256, c.row_id, c.loop, c.checkpoint_sha256),
        )

    def external_counts(self) -> list[ExternalCounts]:
        """Every imported per-depth summary, in chain order."""
        return [
            ExternalCounts(
                seq,
                data["protocol_sha256"],
                data["id"],
                data["arm"],
                {int(depth): (int(c), int(t)) for depth, (c, t) in data["counts"].items()},
            )
            for seq, data in self.db.entry_data("external_counts")
        ]
