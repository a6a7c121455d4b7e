"""Auditor views (created by the migrations; SQL documented in docs/schema.md).

* ``v_evidence_by_checkpoint`` -- evidence joined to its checkpoint and run.
* ``v_accuracy_by_arm_depth``  -- n / correct / accuracy per arm, checkpoint, manifest, depth, loop.
* ``v_lineage``                -- every checkpoint with each of its ancestors (recursive CTE).
* ``v_claim_evidence``         -- claims -> stat_tests -> the exact evidence rows each used -> checkpoints.
* ``v_claim_status``           -- each claim with its first and latest recorded outcome.
* ``v_final_readings``         -- each row's final reading per arm and checkpoint (migration 0002;
  the rule of ``ledger.store.final_reading``).

pandas is imported only when a DataFrame is asked for.
"""

from __future__ import annotations

VIEW_NAMES = (
    "v_evidence_by_checkpoint",
    "v_accuracy_by_arm_depth",
    "v_lineage",
    "v_claim_evidence",
    "v_claim_status",
    "v_final_readings",
)


def views_as_dataframes(store, names=VIEW_NAMES) -> dict:
    """Every auditor view as a pandas DataFrame, keyed by view name (read-only)."""
    return {name: store.query_df(f"SELECT * FROM {name}") for name in names}
