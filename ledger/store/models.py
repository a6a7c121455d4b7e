"""SQLAlchemy 2 typed declarative models of the ledger database.

Every domain table (everything but ``chain_entries``) carries:

* ``id`` -- assigned by the store inside the write transaction (max + 1), and part of
  the row's chained record, so swapping or renumbering rows is detected;
* ``entry_seq`` -- the chain entry that recorded the row (FK to ``chain_entries.seq``);
* ``recorded_at`` -- the UTC ISO-8601 timestamp of that chain entry.

Column types are deliberately limited to Integer, Float, Boolean, String and Text
(JSON documents are stored as canonical JSON *text*), so that a row read back from
any backend turns into exactly the record that was hashed into the chain.

Foreign keys use natural keys (SHA-256 hex digests, run ids, claim ids) so that an
auditor's SQL reads naturally: ``evidence.checkpoint_sha256 = checkpoints.sha256``.

The schema itself is created by the Alembic migrations in ``ledger/store/migrations``;
these models are the reference the first revision was generated from (a test checks
that the migrated database and the models agree).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SHA = String(64)
GENESIS_HASH = "0" * 64

CHECKPOINT_STATUSES = ("promoted", "exploratory", "failed")
DEVIATION_TIMINGS = ("before_data", "after_data", "after_analysis")
CLAIM_OUTCOMES = ("supported", "refuted", "unverifiable")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class ChainEntryRecord(Base):
    """One entry of the append-only hash chain (one leaf of the Merkle log)."""

    __tablename__ = "chain_entries"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(64))
    recorded_at: Mapped[str] = mapped_column(String(40))
    payload: Mapped[str] = mapped_column(Text)
    leaf_hash: Mapped[str] = mapped_column(SHA)
    prev_hash: Mapped[str] = mapped_column(SHA)
    entry_hash: Mapped[str] = mapped_column(SHA, unique=True)


class _Chained:
    """Columns shared by every domain table."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    entry_seq: Mapped[int] = mapped_column(ForeignKey("chain_entries.seq"), index=True)
    recorded_at: Mapped[str] = mapped_column(String(40))


class ProtocolRecord(_Chained, Base):
    __tablename__ = "protocols"

    sha256: Mapped[str] = mapped_column(SHA, unique=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    canonical_json: Mapped[str] = mapped_column(Text)


class DeviationRecord(_Chained, Base):
    __tablename__ = "deviations"
    __table_args__ = (CheckConstraint("timing IN ('before_data', 'after_data', 'after_analysis')", name="timing"),)

    protocol_sha256: Mapped[str] = mapped_column(ForeignKey("protocols.sha256"), index=True)
    item: Mapped[str] = mapped_column(String(300))
    planned: Mapped[str] = mapped_column(Text)
    actual: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    timing: Mapped[str] = mapped_column(String(20))
    new_protocol_sha256: Mapped[str | None] = mapped_column(ForeignKey("protocols.sha256"))


class ManifestRecord(_Chained, Base):
    __tablename__ = "manifests"

    sha256: Mapped[str] = mapped_column(SHA, unique=True)
    name: Mapped[str] = mapped_column(String(200))
    n_rows: Mapped[int] = mapped_column(Integer)
    protocol_sha256: Mapped[str | None] = mapped_column(ForeignKey("protocols.sha256"))


class RowRecord(_Chained, Base):
    __tablename__ = "rows"
    __table_args__ = (
        UniqueConstraint("manifest_sha256", "row_id"),
        UniqueConstraint("manifest_sha256", "position"),
    )

    manifest_sha256: Mapped[str] = mapped_column(ForeignKey("manifests.sha256"))
    position: Mapped[int] = mapped_column(Integer)
    row_id: Mapped[str] = mapped_column(String(200))
    sha256: Mapped[str] = mapped_column(SHA, index=True)
    task: Mapped[str] = mapped_column(String(40))
    surface: Mapped[str] = mapped_column(String(40))
    depth: Mapped[int] = mapped_column(Integer)
    canonical_json: Mapped[str] = mapped_column(Text)


class RunRecord(_Chained, Base):
    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(100), unique=True)
    kind: Mapped[str] = mapped_column(String(40))
    protocol_sha256: Mapped[str | None] = mapped_column(ForeignKey("protocols.sha256"), index=True)
    arm: Mapped[str | None] = mapped_column(String(100))
    config_json: Mapped[str] = mapped_column(Text)
    environment_json: Mapped[str] = mapped_column(Text)
    rng_json: Mapped[str] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)


class CheckpointRecord(_Chained, Base):
    __tablename__ = "checkpoints"
    __table_args__ = (CheckConstraint("status IN ('promoted', 'exploratory', 'failed')", name="status"),)

    sha256: Mapped[str] = mapped_column(SHA, unique=True)
    path: Mapped[str | None] = mapped_column(Text)
    arm: Mapped[str] = mapped_column(String(100), index=True)
    parent_sha256: Mapped[str | None] = mapped_column(ForeignKey("checkpoints.sha256"), index=True)
    status: Mapped[str] = mapped_column(String(20))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.run_id"))
    stage: Mapped[str | None] = mapped_column(String(100))
    gate_results_json: Mapped[str | None] = mapped_column(Text)
    meta_json: Mapped[str | None] = mapped_column(Text)


class EvidenceRecord(_Chained, Base):
    __tablename__ = "evidence"
    __table_args__ = (
        ForeignKeyConstraint(["manifest_sha256", "row_id"], ["rows.manifest_sha256", "rows.row_id"]),
        UniqueConstraint("run_id", "manifest_sha256", "row_id", "arm", "checkpoint_sha256", "loop"),
        Index("ix_evidence_checkpoint_arm_loop", "checkpoint_sha256", "arm", "loop"),
    )

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.run_id"))
    manifest_sha256: Mapped[str] = mapped_column(ForeignKey("manifests.sha256"))
    row_id: Mapped[str] = mapped_column(String(200))
    arm: Mapped[str] = mapped_column(String(100))
    checkpoint_sha256: Mapped[str] = mapped_column(ForeignKey("checkpoints.sha256"))
    loop: Mapped[int] = mapped_column(Integer)
    prediction: Mapped[str | None] = mapped_column(Text)
    # NULL where no single answer is right (a loop above the diagonal: depth < loop).
    correct: Mapped[bool | None] = mapped_column(Boolean(create_constraint=True, name="correct"))
    score_margin: Mapped[float | None] = mapped_column(Float)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    tokens_generated: Mapped[int | None] = mapped_column(Integer)
    detail_json: Mapped[str | None] = mapped_column(Text)


class GateResultRecord(_Chained, Base):
    __tablename__ = "gate_results"

    checkpoint_sha256: Mapped[str] = mapped_column(ForeignKey("checkpoints.sha256"), index=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.run_id"))
    gate: Mapped[str] = mapped_column(String(100))
    metric: Mapped[str | None] = mapped_column(String(100))
    value: Mapped[float | None] = mapped_column(Float)
    threshold: Mapped[float | None] = mapped_column(Float)
    comparison: Mapped[str | None] = mapped_column(String(8))
    passed: Mapped[bool] = mapped_column(Boolean(create_constraint=True, name="passed"))
    # stop: a failure is a hard stop that fails the lineage; flag: recorded only.
    action: Mapped[str] = mapped_column(String(8))
    detail_json: Mapped[str | None] = mapped_column(Text)


class ClaimRecord(_Chained, Base):
    __tablename__ = "claims"

    claim_id: Mapped[str] = mapped_column(String(200), unique=True)
    protocol_sha256: Mapped[str | None] = mapped_column(ForeignKey("protocols.sha256"))
    spec_sha256: Mapped[str] = mapped_column(SHA)
    spec_json: Mapped[str] = mapped_column(Text)


class StatTestRecord(_Chained, Base):
    __tablename__ = "stat_tests"

    test_id: Mapped[str] = mapped_column(String(100), unique=True)
    claim_id: Mapped[str | None] = mapped_column(ForeignKey("claims.claim_id"), index=True)
    statistic: Mapped[str] = mapped_column(String(100))
    method: Mapped[str | None] = mapped_column(String(100))
    n: Mapped[int | None] = mapped_column(Integer)
    estimate: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    params_json: Mapped[str | None] = mapped_column(Text)
    result_json: Mapped[str | None] = mapped_column(Text)


class StatTestInputRecord(_Chained, Base):
    """Which evidence a statistical test consumed: one row per role (e.g. 'a', 'b')."""

    __tablename__ = "stat_test_inputs"
    __table_args__ = (UniqueConstraint("test_id", "role"),)

    test_id: Mapped[str] = mapped_column(ForeignKey("stat_tests.test_id"))
    role: Mapped[str] = mapped_column(String(40))
    arm: Mapped[str] = mapped_column(String(100))
    checkpoint_sha256: Mapped[str] = mapped_column(ForeignKey("checkpoints.sha256"), index=True)
    manifest_sha256: Mapped[str | None] = mapped_column(ForeignKey("manifests.sha256"))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.run_id"))
    loop: Mapped[int | None] = mapped_column(Integer)


class StatTestEvidenceRecord(_Chained, Base):
    """The exact evidence rows a statistical test computed on (``ledger.judge.selection``): one row each."""

    __tablename__ = "stat_test_evidence"
    __table_args__ = (UniqueConstraint("test_id", "evidence_id"),)

    test_id: Mapped[str] = mapped_column(ForeignKey("stat_tests.test_id"))
    evidence_id: Mapped[int] = mapped_column(ForeignKey("evidence.id"), index=True)


class ClaimOutcomeRecord(_Chained, Base):
    __tablename__ = "claim_outcomes"
    __table_args__ = (CheckConstraint("outcome IN ('supported', 'refuted', 'unverifiable')", name="outcome"),)

    claim_id: Mapped[str] = mapped_column(ForeignKey("claims.claim_id"), index=True)
    outcome: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text)
    stat_test_id: Mapped[str | None] = mapped_column(ForeignKey("stat_tests.test_id"))
    detail_json: Mapped[str | None] = mapped_column(Text)


#: Every table the store writes, in an order that respects foreign keys.
DOMAIN_TABLES = (
    "protocols",
    "deviations",
    "manifests",
    "rows",
    "runs",
    "checkpoints",
    "gate_results",
    "evidence",
    "claims",
    "stat_tests",
    "stat_test_inputs",
    "stat_test_evidence",
    "claim_outcomes",
)
ALL_TABLES = ("chain_entries",) + DOMAIN_TABLES


def table(name: str):
    """The ``sqlalchemy.Table`` of a ledger table by name."""
    return Base.metadata.tables[name]
