"""The store's own rules: results never precede the plan, and lineage is never continued past a failure.

No caller flag switches them off: the typed writers call them inside the write
transaction, so the rule and the write see the same ledger.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ledger.store.base import Database
from ledger.store.engine import StoreError


class PreregistrationRequired(StoreError):
    """Evidence or a run for a protocol that was never registered."""


class LineageRefused(StoreError):
    """A checkpoint would continue from a parent that is not promoted."""


class ConflictError(StoreError):
    """The same identity is already recorded with different content."""


def gate_action(action: str) -> str:
    if action not in ("stop", "flag"):
        raise ValueError(f"gate action must be 'stop' or 'flag', got {action!r}")
    return action


class StoreRules:
    """Preregistration of evidence and the lineage rule."""

    def __init__(self, db: Database):
        self.db = db

    def require_registered_run(self, conn: Connection, run_id: str | None) -> None:
        """Evidence belongs to a run of a registered protocol: results never precede the plan."""
        run = self.db.fetch_one(conn, "runs", run_id=run_id) if run_id is not None else None
        if run is None:
            raise StoreError(f"evidence names run {run_id!r}, which is not in the ledger")
        if run["protocol_sha256"] is None:
            raise PreregistrationRequired(
                f"refusing evidence for run {run_id!r}: it belongs to no registered protocol "
                "(run `ledger register PROTOCOL` before any result)"
            )

    def check_continuation_in(self, conn: Connection, parent_sha256: str, *, child_status: str) -> None:
        """Refuse to continue from a lineage that failed a hard gate or that is exploratory.

        Walks the parent's whole ancestry. Any ancestor with status ``failed``, or with a
        failed gate whose action is ``stop`` (a retention floor or guardrail), refuses the
        continuation, naming the ancestor and the gate. An ``exploratory`` ancestor refuses
        anything but an exploratory child: tuning runs may build on each other, but no
        promoted result descends from them. A ``failed`` child (a stage whose stop gate failed)
        continues nothing, so an exploratory lineage records it too: a tuning run's hard stop is
        kept, not lost.
        """
        seen: set[str] = set()
        current: str | None = parent_sha256
        generation = 1
        while current is not None:
            if current in seen:
                raise LineageRefused(f"checkpoint {current} appears twice in its own ancestry")
            seen.add(current)
            node = self.db.fetch_one(conn, "checkpoints", sha256=current)
            if node is None:
                raise LineageRefused(
                    f"refusing to continue: ancestor {current} (generation {generation}) is not in the ledger"
                )
            who = f"ancestor {current[:12]} ({node['arm']}/{node['stage'] or '-'}, generation {generation})"
            failed_gates = [
                gate
                for gate in self.db.fetch_all(conn, "gate_results", checkpoint_sha256=current)
                if not gate["passed"] and gate["action"] == "stop"
            ]
            if failed_gates:
                names = ", ".join(sorted({gate["gate"] for gate in failed_gates}))
                raise LineageRefused(f"refusing to continue: {who} failed gate {names}")
            if node["status"] == "failed":
                raise LineageRefused(f"refusing to continue: {who} has status 'failed'")
            if node["status"] == "exploratory" and child_status not in ("exploratory", "failed"):
                raise LineageRefused(
                    f"refusing to continue: {who} is exploratory; only exploratory work may build on it"
                )
            current = node["parent_sha256"]
            generation += 1

    def check_continuation(self, parent_sha256: str, *, child_status: str = "promoted") -> None:
        """Raise ``LineageRefused`` if a new checkpoint may not descend from ``parent_sha256``."""
        with self.db.read() as conn:
            self.check_continuation_in(conn, parent_sha256, child_status=child_status)
