"""The canned queries of the auditor's web view (``ledger serve``; ``ledger.report.web_view``).

SQL lives in the store: these are read by Datasette over a snapshot of the ledger. They follow a claim:
``claims`` -> ``claim`` (its tests and outcomes) -> ``test_rows`` (exactly the evidence rows a test computed
on, view ``v_claim_evidence``) -> ``checkpoint`` (the lineage back to the base model, view ``v_lineage``).
SQLite's ``json_extract`` is fine here: Datasette reads SQLite only.
"""

from __future__ import annotations

CANNED_QUERIES = {
    "claims": {
        "title": "Every claim",
        "description": "Each preregistered claim with its first recorded outcome (its result). "
        "Click a claim to see its statistical tests.",
        "sql": """SELECT s.claim_id,
       json_extract(cl.spec_json, '$.statement') AS statement,
       json_extract(cl.spec_json, '$.statistic') AS statistic,
       s.first_outcome,
       s.latest_outcome,
       s.n_evaluations,
       p.name AS protocol,
       p.version,
       s.registered_at
FROM v_claim_status s
JOIN claims cl ON cl.claim_id = s.claim_id
LEFT JOIN protocols p ON p.sha256 = cl.protocol_sha256
ORDER BY cl.id""",
    },
    "claim": {
        "title": "One claim: its tests and outcomes",
        "description": "Every recorded outcome of the claim and the statistical test it rests on. "
        "Click a test to see exactly the evidence rows it computed on.",
        "sql": """SELECT cl.claim_id,
       json_extract(cl.spec_json, '$.statement') AS statement,
       o.outcome,
       o.reason,
       o.stat_test_id AS test_id,
       t.statistic,
       t.method,
       t.n,
       t.estimate,
       t.ci_low,
       t.ci_high,
       t.p_value,
       (SELECT COUNT(*) FROM stat_test_evidence s WHERE s.test_id = t.test_id) AS evidence_rows,
       o.recorded_at AS judged_at
FROM claims cl
LEFT JOIN claim_outcomes o ON o.claim_id = cl.claim_id
LEFT JOIN stat_tests t ON t.test_id = o.stat_test_id
WHERE cl.claim_id = :claim_id
ORDER BY o.id""",
    },
    "test_rows": {
        "title": "The evidence rows of one statistical test",
        "description": "Exactly the readings the test computed on, each with the checkpoint that read it. "
        "Click a checkpoint to see its lineage, an evidence id to see the whole row.",
        "sql": """SELECT evidence_id, arm, checkpoint_sha256, row_id, depth, loop, prediction, correct, role, claim_id
FROM v_claim_evidence
WHERE test_id = :test_id
ORDER BY arm, depth, row_id""",
    },
    "checkpoint": {
        "title": "One checkpoint and its lineage",
        "description": "The checkpoint (generation 0) and each ancestor back to the base model, with status "
        "and file. Gate results of the checkpoint are in the gate_results table.",
        "sql": """SELECT generation, ancestor_sha256, ancestor_arm, ancestor_stage, ancestor_status, ancestor_path,
       checkpoint_sha256
FROM v_lineage
WHERE checkpoint_sha256 = :checkpoint_sha256
ORDER BY generation""",
    },
}
