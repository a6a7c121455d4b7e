"""What every table, view and column of a ledger means, for the auditor's web view (``ledger serve``).

The same words as ``docs/schema.md``, one line each. A column of the same name means the same in every
table (``COMMON``) unless the table says otherwise; ``tests/report/test_serve.py`` checks that every
column of every table and view of a real ledger is described here.
"""

from __future__ import annotations

COMMON = {
    "id": "integer key, assigned by the store inside the write transaction; part of the chained record",
    "entry_seq": "the chain entry (chain_entries.seq) that recorded this row",
    "recorded_at": "UTC time of the chain entry that recorded this row (ISO 8601)",
    "protocol_sha256": "SHA-256 of the registered protocol's canonical JSON (protocols.sha256)",
    "manifest_sha256": "SHA-256 of the manifest: its rows' canonical JSON, one per line (manifests.sha256)",
    "checkpoint_sha256": "SHA-256 of the checkpoint file's bytes (checkpoints.sha256)",
    "run_id": "the run that recorded it (runs.run_id)",
    "row_id": "the manifest row's id (unique within its manifest)",
    "arm": "the arm: a model variant of the protocol (base for a base model)",
    "claim_id": "the claim's key: PROTOCOL/CLAIM as preregistered",
    "test_id": "the statistical test (stat_tests.test_id)",
    "loop": "recurrent iterations at inference (0 for an arm without a loop)",
    "depth": "the row's reasoning depth (steps from the start)",
    "prediction": "the decoded answer (empty: nothing parseable)",
    "correct": "1 if the prediction is right, 0 if wrong; empty where no single answer is right",
    "score_margin": "score of the best answer minus the runner-up",
    "latency_ms": "milliseconds the reading took",
    "tokens_generated": "tokens the model generated for the reading",
    "detail_json": "free canonical JSON recorded with it",
    "statistic": "the claim's statistic (paired_exact, accuracy, noninferiority, frontier_ratio, ...)",
    "estimate": "the test's point estimate (a difference, an accuracy, a frontier)",
    "p_value": "the test's p-value (exact where the statistic is exact)",
    "role": "which input of the test the row belongs to (one per arm and checkpoint)",
    "parent_sha256": "the checkpoint it continued from (empty for a base model)",
    "status": "promoted, exploratory or failed",
    "stage": "the training stage that produced the checkpoint",
    "name": "the name given in the document",
    "version": "the protocol's version number",
    "canonical_json": "the canonical JSON as registered (sorted keys, no whitespace)",
    "sha256": "SHA-256 of the canonical JSON or file bytes (unique)",
    "outcome": "supported, refuted or unverifiable",
    "reason": "why, in words, with the figures",
    "evidence_id": "the evidence row (evidence.id)",
    "manifest": "the manifest's name",
    "kind": "what kind of record it is",
    "spec_sha256": "SHA-256 of the claim's canonical spec as preregistered",
}

TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "alembic_version": (
        "The schema revision the migrations stamped (verify checks it).",
        {"version_num": "the revision id"},
    ),
    "chain_entries": (
        "The hash chain and RFC 6962 Merkle log: one entry per write; every other table's rows are inside them.",
        {
            "seq": "1, 2, 3, ... without gaps; the leaf index + 1 in the Merkle log",
            "kind": "protocol, deviation, manifest, run, checkpoint, gate_result, evidence, claim, stat_test, ...",
            "payload": 'canonical JSON {"kind", "seq", "ts", "data", "records"}: the rows this entry wrote',
            "leaf_hash": "SHA-256(0x00 || payload): the RFC 6962 leaf hash",
            "prev_hash": "the previous entry's entry_hash (64 zeros for the first)",
            "entry_hash": "SHA-256(prev_hash || leaf_hash) over the raw digests",
        },
    ),
    "protocols": ("Preregistered protocols, as registered before any result.", {}),
    "deviations": (
        "Recorded departures from a registered protocol, with when they were decided.",
        {
            "item": "what changed, e.g. training.lr",
            "planned": "the planned value",
            "actual": "the value used",
            "timing": "before_data, after_data or after_analysis",
            "new_protocol_sha256": "the revised protocol, if one was registered",
        },
    ),
    "manifests": (
        "The fixed, hashed row sets every arm is read on.",
        {"n_rows": "number of rows", "protocol_sha256": "the protocol it was registered under"},
    ),
    "rows": (
        "Every row of every manifest.",
        {
            "position": "0-based index in the manifest",
            "task": "the task generator",
            "surface": "the surface rendering of the task",
            "canonical_json": "the row: prompt, answer, path, symbols, ...",
        },
    ),
    "runs": (
        "Training, evaluation and import runs.",
        {
            "kind": "train, eval, import, ...",
            "config_json": "the run's configuration",
            "environment_json": "versions and hardware",
            "rng_json": "the seeds",
            "note": "free text",
        },
    ),
    "checkpoints": (
        "Model states and their lineage (parent_sha256); the store refuses a child of a failed ancestor.",
        {
            "sha256": "SHA-256 of the checkpoint file's bytes (unique)",
            "path": "where the file was recorded",
            "gate_results_json": "summary of the gate results recorded with it",
            "meta_json": "free canonical JSON: training steps, FLOPs, losses, ...",
        },
    ),
    "gate_results": (
        "Retention floors and guardrails measured on checkpoints.",
        {
            "gate": "the gate's name",
            "metric": "what was measured",
            "value": "the measured value",
            "threshold": "the gate's threshold",
            "comparison": "how value is compared with threshold (>=, <=, ...)",
            "passed": "1 if the gate passed",
            "action": "stop (a failure ends the lineage) or flag (recorded only)",
        },
    ),
    "evidence": ("Row-level readings: one arm's checkpoint on one manifest row at one loop.", {}),
    "claims": (
        "Preregistered claims.",
        {"spec_json": "the claim's canonical spec"},
    ),
    "stat_tests": (
        "Statistical tests computed for claims.",
        {
            "method": "the test's method or alternative",
            "n": "rows (or pairs) the test counted",
            "ci_low": "lower end of the confidence interval",
            "ci_high": "upper end of the confidence interval",
            "params_json": "the claim spec the test was computed for",
            "result_json": "the full result with every figure",
        },
    ),
    "stat_test_inputs": (
        "The arms and checkpoints each statistical test read, one row per role.",
        {"loop": "the loop read (empty: each row's final reading)"},
    ),
    "stat_test_evidence": ("The exact evidence rows each statistical test computed on, one row each.", {}),
    "claim_outcomes": (
        "Each evaluation of a claim; the first recorded is the claim's outcome.",
        {"stat_test_id": "the test the outcome rests on (stat_tests.test_id)"},
    ),
}

VIEWS: dict[str, tuple[str, dict[str, str]]] = {
    "v_evidence_by_checkpoint": (
        "Every evidence row with its checkpoint and run.",
        {
            "checkpoint_status": "the checkpoint's status",
            "checkpoint_stage": "the checkpoint's training stage",
            "checkpoint_path": "where the checkpoint file was recorded",
            "run_kind": "the run's kind",
        },
    ),
    "v_accuracy_by_arm_depth": (
        "Accuracy per arm, checkpoint, manifest, depth and loop.",
        {
            "n": "readings with a right answer",
            "n_correct": "readings that were right",
            "accuracy": "n_correct / n",
        },
    ),
    "v_lineage": (
        "Every checkpoint's ancestors, generation by generation, back to its base model.",
        {
            "generation": "0 for the checkpoint itself, 1 for its parent, ...",
            "ancestor_sha256": "the ancestor checkpoint",
            "ancestor_arm": "the ancestor's arm",
            "ancestor_status": "the ancestor's status",
            "ancestor_stage": "the ancestor's training stage",
            "ancestor_path": "where the ancestor's file was recorded",
        },
    ),
    "v_claim_evidence": (
        "Each claim's statistical test and exactly the evidence rows it computed on.",
        {"checkpoint_status": "the status of the checkpoint that read the row"},
    ),
    "v_claim_status": (
        "Each claim with its first and latest recorded outcome.",
        {
            "registered_at": "when the claim was preregistered",
            "first_outcome": "the claim's first recorded outcome: its result",
            "first_reason": "why",
            "first_recorded_at": "when it was recorded",
            "latest_outcome": "the latest recorded outcome",
            "latest_reason": "why",
            "latest_recorded_at": "when it was recorded",
            "n_evaluations": "how many outcomes were recorded",
        },
    ),
    "v_final_readings": (
        "Each row's final reading per arm and checkpoint (the reading a claim without a loop uses).",
        {},
    ),
}


def describe(name: str, columns: list[str]) -> tuple[str, dict[str, str]]:
    """(description, column -> description) of a table or view; a column left undescribed is left out."""
    description, specific = TABLES.get(name) or VIEWS.get(name) or ("", {})
    described = {column: specific.get(column) or COMMON.get(column) for column in columns}
    return description, {column: text for column, text in described.items() if text}
