"""Reads of the judgements: preregistered claims and every outcome recorded for them."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select

from ledger.store.base import Database
from ledger.store.models import table


def _json_object(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class RegisteredClaim:
    id: int
    claim_id: str
    protocol_sha256: str | None
    spec_sha256: str
    spec_json: str
    entry_seq: int

    def spec(self) -> dict:
        return _json_object(self.spec_json)


@dataclass(frozen=True)
class RecordedOutcome:
    id: int
    claim_id: str
    outcome: str
    reason: str
    stat_test_id: str | None
    detail_json: str | None
    test_p_value: float | None  # the p-value of the statistical test it rests on

    def detail(self) -> dict:
        return _json_object(self.detail_json)


class ClaimReads:
    """Registered claims, their tests and their outcomes."""

    def __init__(self, db: Database):
        self.db = db

    def claims(self, claim_id: str | None = None) -> list[RegisteredClaim]:
        """Registered claims in registration order (the one with ``claim_id``, if given)."""
        c = table("claims")
        stmt = select(c.c.id, c.c.claim_id, c.c.protocol_sha256, c.c.spec_sha256, c.c.spec_json, c.c.entry_seq)
        if claim_id is not None:
            stmt = stmt.where(c.c.claim_id == claim_id)
        return self.db.records(stmt.order_by(c.c.id), RegisteredClaim)

    def claim(self, claim_id: str) -> RegisteredClaim | None:
        found = self.claims(claim_id)
        return found[0] if found else None

    def claim_outcomes(self) -> list[RecordedOutcome]:
        """Every recorded outcome in recording order: a claim's first is its first recorded outcome."""
        o, t = table("claim_outcomes"), table("stat_tests")
        stmt = (
            select(
                o.c.id,
                o.c.claim_id,
                o.c.outcome,
                o.c.reason,
                o.c.stat_test_id,
                o.c.detail_json,
                t.c.p_value.label("test_p_value"),
            )
            .outerjoin(t, t.c.test_id == o.c.stat_test_id)
            .order_by(o.c.id)
        )
        return self.db.records(stmt, RecordedOutcome)

    def first_outcome(self, claim_id: str) -> dict | None:
        rows = self.db.rows_of("claim_outcomes", claim_id=claim_id)
        return rows[0] if rows else None
