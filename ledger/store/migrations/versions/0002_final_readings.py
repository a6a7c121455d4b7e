"""auditor view v_final_readings: each row's final reading per arm and checkpoint

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00.000000

The rule is ``ledger.store.final_reading.FINAL_CASES``, frozen here as SQL with this
revision (a later change to the rule is a new revision): among an arm's readings of a
row by one checkpoint that have a single right answer (``correct`` not NULL), prefer
loop = depth, then loop 0, then loop 1 of a depth-0 row; among repeats, the latest id.
Portable SQL (SQLite >= 3.25 and PostgreSQL): ROW_NUMBER() over a window.
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

V_FINAL_READINGS = """
SELECT f.evidence_id,
       f.run_id,
       f.protocol_sha256,
       f.manifest_sha256,
       f.manifest,
       f.row_id,
       f.depth,
       f.arm,
       f.checkpoint_sha256,
       f.loop,
       f.prediction,
       f.correct,
       f.latency_ms,
       f.tokens_generated
FROM (
    SELECT e.id AS evidence_id,
           e.run_id,
           u.protocol_sha256,
           e.manifest_sha256,
           m.name AS manifest,
           e.row_id,
           rw.depth,
           e.arm,
           e.checkpoint_sha256,
           e.loop,
           e.prediction,
           e.correct,
           e.latency_ms,
           e.tokens_generated,
           ROW_NUMBER() OVER (
               PARTITION BY e.manifest_sha256, e.arm, e.checkpoint_sha256, e.row_id
               ORDER BY CASE
                            WHEN e.loop = rw.depth THEN 0
                            WHEN e.loop = 0 THEN 1
                            WHEN rw.depth = 0 AND e.loop = 1 THEN 2
                        END,
                        e.id DESC
           ) AS preference
    FROM evidence e
    JOIN "rows" rw ON rw.manifest_sha256 = e.manifest_sha256 AND rw.row_id = e.row_id
    JOIN manifests m ON m.sha256 = e.manifest_sha256
    JOIN runs u ON u.run_id = e.run_id
    WHERE e.correct IS NOT NULL
      AND (e.loop = rw.depth OR e.loop = 0 OR (rw.depth = 0 AND e.loop = 1))
) f
WHERE f.preference = 1
"""


def upgrade() -> None:
    op.execute(f"CREATE VIEW v_final_readings AS\n{V_FINAL_READINGS}")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_final_readings")
