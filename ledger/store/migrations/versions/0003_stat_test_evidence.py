"""stat_test_evidence: the exact evidence rows each statistical test computed on

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 20:00:00.000000

Until this revision a test recorded only the (arm, checkpoint, manifest) it read, and
``v_claim_evidence`` joined every reading of those: every loop and depth of the arms (60
readings for a claim computed on 20). A test now records, in the same chain entry, one row per
evidence row its statistic used (``ledger.judge.selection``), and the view returns exactly
those. Tests recorded before this revision have no such rows: the view returns none for them
(their stat_test_inputs still name the arms and checkpoints). A new chained table rather than
new columns: entries already in a chain keep their records.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

V_CLAIM_EVIDENCE_EXACT = """
SELECT cl.claim_id,
       t.test_id,
       t.statistic,
       t.estimate,
       t.p_value,
       i.role,
       e.arm,
       e.checkpoint_sha256,
       ck.status AS checkpoint_status,
       ck.parent_sha256,
       e.id AS evidence_id,
       e.run_id,
       e.manifest_sha256,
       e.row_id,
       rw.depth,
       e.loop,
       e.prediction,
       e.correct,
       e.score_margin
FROM claims cl
JOIN stat_tests t ON t.claim_id = cl.claim_id
JOIN stat_test_evidence s ON s.test_id = t.test_id
JOIN evidence e ON e.id = s.evidence_id
JOIN "rows" rw ON rw.manifest_sha256 = e.manifest_sha256 AND rw.row_id = e.row_id
JOIN checkpoints ck ON ck.sha256 = e.checkpoint_sha256
LEFT JOIN stat_test_inputs i ON i.test_id = t.test_id
                             AND i.arm = e.arm
                             AND i.checkpoint_sha256 = e.checkpoint_sha256
                             AND (i.manifest_sha256 IS NULL OR i.manifest_sha256 = e.manifest_sha256)
"""

V_CLAIM_EVIDENCE_0001 = """
SELECT cl.claim_id,
       t.test_id,
       t.statistic,
       t.estimate,
       t.p_value,
       i.role,
       i.arm,
       i.checkpoint_sha256,
       ck.status AS checkpoint_status,
       ck.parent_sha256,
       e.id AS evidence_id,
       e.run_id,
       e.manifest_sha256,
       e.row_id,
       e.loop,
       e.prediction,
       e.correct,
       e.score_margin
FROM claims cl
JOIN stat_tests t ON t.claim_id = cl.claim_id
JOIN stat_test_inputs i ON i.test_id = t.test_id
JOIN evidence e ON e.checkpoint_sha256 = i.checkpoint_sha256
               AND e.arm = i.arm
               AND (i.manifest_sha256 IS NULL OR e.manifest_sha256 = i.manifest_sha256)
               AND (i.run_id IS NULL OR e.run_id = i.run_id)
               AND (i.loop IS NULL OR e.loop = i.loop)
JOIN checkpoints ck ON ck.sha256 = e.checkpoint_sha256
"""


def upgrade() -> None:
    op.create_table(
        "stat_test_evidence",
        sa.Column("test_id", sa.String(length=100), nullable=False),
        sa.Column("evidence_id", sa.Integer(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("entry_seq", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["entry_seq"], ["chain_entries.seq"], name=op.f("fk_stat_test_evidence_entry_seq_chain_entries")
        ),
        sa.ForeignKeyConstraint(
            ["evidence_id"], ["evidence.id"], name=op.f("fk_stat_test_evidence_evidence_id_evidence")
        ),
        sa.ForeignKeyConstraint(
            ["test_id"], ["stat_tests.test_id"], name=op.f("fk_stat_test_evidence_test_id_stat_tests")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stat_test_evidence")),
        sa.UniqueConstraint("test_id", "evidence_id", name=op.f("uq_stat_test_evidence_test_id_evidence_id")),
    )
    with op.batch_alter_table("stat_test_evidence", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_stat_test_evidence_entry_seq"), ["entry_seq"], unique=False)
        batch_op.create_index(batch_op.f("ix_stat_test_evidence_evidence_id"), ["evidence_id"], unique=False)
    _append_only("stat_test_evidence")
    op.execute("DROP VIEW IF EXISTS v_claim_evidence")
    op.execute(f"CREATE VIEW v_claim_evidence AS\n{V_CLAIM_EVIDENCE_EXACT}")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_claim_evidence")
    op.execute(f"CREATE VIEW v_claim_evidence AS\n{V_CLAIM_EVIDENCE_0001}")
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS stat_test_evidence_no_{action}")
    elif dialect == "postgresql":
        for kind in ("append_only", "no_truncate"):
            op.execute(f'DROP TRIGGER IF EXISTS stat_test_evidence_{kind} ON "stat_test_evidence"')
    op.drop_table("stat_test_evidence")


def _append_only(table: str) -> None:
    """The triggers of revision 0001, on one more table (PostgreSQL's function exists since 0001)."""
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f'CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON "{table}"\n'
                f"BEGIN SELECT RAISE(ABORT, 'append-only: {action} on {table} is not allowed'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            f'CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON "{table}" '
            "FOR EACH ROW EXECUTE FUNCTION ledger_append_only()"
        )
        op.execute(
            f'CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON "{table}" '
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only()"
        )
