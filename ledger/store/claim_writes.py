"""Typed writers of judgements: preregistered claims, the statistical tests run on them, their outcomes.

A claim is registered once under its id (a changed spec is refused: it is a deviation and
a new id); outcomes only accumulate, and the first one recorded is the claim's first outcome.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.canonical import canonical_json, sha256_hex
from ledger.store.append import AppendLog
from ledger.store.base import Database
from ledger.store.models import CLAIM_OUTCOMES
from ledger.store.records import json_or_none, to_plain
from ledger.store.rules import ConflictError


class ClaimWrites:
    """Claims, their statistical tests and their outcomes, appended to the log."""

    def __init__(self, db: Database, log: AppendLog):
        self.db = db
        self.log = log

    def add_claim(self, claim_id: str, spec: Any, *, protocol_sha256: str | None = None) -> str:
        """Register (preregister) a claim; returns the SHA-256 of its canonical spec.

        Idempotent for the same spec; a different spec under the same id is refused
        (record a deviation and use a new claim id).
        """
        spec = to_plain(spec)
        canonical = canonical_json(spec)
        sha = sha256_hex(canonical)
        with self.db.write() as conn:
            existing = self.db.fetch_one(conn, "claims", claim_id=claim_id)
            if existing is not None:
                if existing["spec_sha256"] != sha:
                    raise ConflictError(
                        f"claim {claim_id!r} is registered with spec {existing['spec_sha256']}, not {sha}: "
                        "a changed claim is a deviation; record it and register a new claim id"
                    )
                return sha
            self.log.append_in(
                conn,
                "claim",
                {},
                {
                    "claims": [
                        {
                            "claim_id": claim_id,
                            "protocol_sha256": protocol_sha256,
                            "spec_sha256": sha,
                            "spec_json": canonical,
                        }
                    ]
                },
            )
        return sha

    def add_stat_test(
        self,
        *,
        statistic: str,
        inputs: Sequence[Mapping[str, Any]],
        claim_id: str | None = None,
        test_id: str | None = None,
        method: str | None = None,
        n: int | None = None,
        estimate: float | None = None,
        ci_low: float | None = None,
        ci_high: float | None = None,
        p_value: float | None = None,
        params: Any = None,
        result: Any = None,
        evidence_ids: Sequence[int] = (),
    ) -> str:
        """Record a statistical test and the evidence it consumed.

        ``inputs``: one dict per role, e.g. ``{"role": "a", "arm": "loop", "checkpoint_sha256": ...,
        "manifest_sha256": ..., "loop": 4}`` (manifest_sha256, run_id, loop optional =
        "all"). ``evidence_ids``: the exact evidence rows the statistic computed on (view
        ``v_claim_evidence``). Returns the test id (uuid4 hex if not given).
        """
        test_id = test_id or uuid.uuid4().hex
        record = {
            "test_id": test_id,
            "claim_id": claim_id,
            "statistic": statistic,
            "method": method,
            "n": n,
            "estimate": estimate,
            "ci_low": ci_low,
            "ci_high": ci_high,
            "p_value": p_value,
            "params_json": json_or_none(to_plain(params)),
            "result_json": json_or_none(to_plain(result)),
        }
        input_rows = [dict(item, test_id=test_id) for item in inputs]
        used = [{"test_id": test_id, "evidence_id": int(evidence_id)} for evidence_id in sorted(set(evidence_ids))]
        records = {"stat_tests": [record], "stat_test_inputs": input_rows, "stat_test_evidence": used}
        with self.db.write() as conn:
            self.log.append_in(conn, "stat_test", {}, records)
        return test_id

    def add_claim_outcome(
        self,
        claim_id: str,
        outcome: str,
        reason: str,
        *,
        stat_test_id: str | None = None,
        detail: Any = None,
    ) -> int:
        """Record an evaluation of a claim (supported / refuted / unverifiable).

        Outcomes accumulate; the first one recorded is the claim's "first recorded
        outcome" (``Store.first_outcome``, view ``v_claim_status``).
        """
        if outcome not in CLAIM_OUTCOMES:
            raise ValueError(f"outcome must be one of {CLAIM_OUTCOMES}, got {outcome!r}")
        record = {
            "claim_id": claim_id,
            "outcome": outcome,
            "reason": reason,
            "stat_test_id": stat_test_id,
            "detail_json": json_or_none(to_plain(detail)),
        }
        with self.db.write() as conn:
            result = self.log.append_in(conn, "claim_outcome", {}, {"claim_outcomes": [record]})
        return result.ids["claim_outcomes"][0]
