"""Reads of the lineage: checkpoints, the gate results that decided them, and their ancestry."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import or_, select, text, union

from ledger.store.base import Database
from ledger.store.models import table


@dataclass(frozen=True)
class RecordedCheckpoint:
    id: int
    sha256: str
    path: str | None
    arm: str
    parent_sha256: str | None
    status: str
    run_id: str | None
    stage: str | None
    recorded_at: str


@dataclass(frozen=True)
class RecordedGate:
    id: int
    checkpoint_sha256: str
    run_id: str | None
    gate: str
    metric: str | None
    value: float | None
    threshold: float | None
    comparison: str | None
    passed: bool
    action: str


def _checkpoint_select():
    c = table("checkpoints")
    return c, select(
        c.c.id, c.c.sha256, c.c.path, c.c.arm, c.c.parent_sha256, c.c.status, c.c.run_id, c.c.stage, c.c.recorded_at
    ).order_by(c.c.id)


class CheckpointReads:
    """Checkpoints, their lineage and their gates."""

    def __init__(self, db: Database):
        self.db = db

    def checkpoint(self, sha256: str) -> RecordedCheckpoint | None:
        found = self.checkpoints([sha256])
        return found[0] if found else None

    def checkpoints(self, sha256s: Iterable[str]) -> list[RecordedCheckpoint]:
        """These checkpoints in recording order."""
        c, stmt = _checkpoint_select()
        return self.db.records(stmt.where(c.c.sha256.in_(list(sha256s))), RecordedCheckpoint)

    def checkpoint_meta(self, sha256s: Iterable[str]) -> dict[str, dict]:
        """The recorded meta (training record: steps, losses, FLOPs, ...) of these checkpoints; {} where none."""
        c = table("checkpoints")
        stmt = select(c.c.sha256, c.c.meta_json).where(c.c.sha256.in_(list(sha256s)))
        with self.db.read() as conn:
            return {sha: json.loads(meta) if meta else {} for sha, meta in conn.execute(stmt)}

    def checkpoints_of_run(self, run_id: str, *, stage: str | None = None) -> list[RecordedCheckpoint]:
        """The run's checkpoints (of one stage, if given) in recording order: the last is the latest."""
        c, stmt = _checkpoint_select()
        stmt = stmt.where(c.c.run_id == run_id)
        if stage is not None:
            stmt = stmt.where(c.c.stage == stage)
        return self.db.records(stmt, RecordedCheckpoint)

    def checkpoints_in_scope(self, protocol_sha256s: Iterable[str]) -> set[str]:
        """Checkpoints recorded by these protocols' runs, and those their runs' evidence names."""
        c, e, u = table("checkpoints"), table("evidence"), table("runs")
        shas = list(protocol_sha256s)
        recorded = select(c.c.sha256).join(u, u.c.run_id == c.c.run_id).where(u.c.protocol_sha256.in_(shas))
        read = select(e.c.checkpoint_sha256).join(u, u.c.run_id == e.c.run_id).where(u.c.protocol_sha256.in_(shas))
        with self.db.read() as conn:
            return {sha for (sha,) in conn.execute(union(recorded, read))}

    def gate_results(self, checkpoint_sha256s: Iterable[str]) -> list[RecordedGate]:
        """Gate results recorded on these checkpoints, in recording order."""
        g = table("gate_results")
        stmt = (
            select(
                g.c.id,
                g.c.checkpoint_sha256,
                g.c.run_id,
                g.c.gate,
                g.c.metric,
                g.c.value,
                g.c.threshold,
                g.c.comparison,
                g.c.passed,
                g.c.action,
            )
            .where(g.c.checkpoint_sha256.in_(list(checkpoint_sha256s)))
            .order_by(g.c.id)
        )
        return self.db.records(stmt, RecordedGate)

    def latest_gate_verdict(self, gate: str, arm: str, protocol_sha256s: Iterable[str]) -> bool | None:
        """Whether ``gate`` last passed on one of the arm's checkpoints in scope (None if never recorded).

        A checkpoint recorded outside any run (a base) counts for every protocol.
        """
        g, c, u = table("gate_results"), table("checkpoints"), table("runs")
        stmt = (
            select(g.c.passed)
            .join(c, c.c.sha256 == g.c.checkpoint_sha256)
            .outerjoin(u, u.c.run_id == c.c.run_id)
            .where(
                g.c.gate == gate,
                c.c.arm == arm,
                or_(u.c.protocol_sha256.is_(None), u.c.protocol_sha256.in_(list(protocol_sha256s))),
            )
            .order_by(g.c.id.desc())
            .limit(1)
        )
        with self.db.read() as conn:
            found = conn.execute(stmt).first()
        return bool(found[0]) if found is not None else None

    def lineage(self, sha256: str) -> list[dict]:
        """The checkpoint and its ancestors, nearest first (generation 0 = itself), as ``v_lineage`` rows."""
        stmt = text("SELECT * FROM v_lineage WHERE checkpoint_sha256 = :sha ORDER BY generation")
        with self.db.read() as conn:
            return [dict(row) for row in conn.execute(stmt, {"sha": sha256}).mappings()]
