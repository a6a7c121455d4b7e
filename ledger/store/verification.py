"""Checking the log: the chain walked (``chain_walk``) in one process or several, the head's history.

``verify_chain`` walks it here; ``start_chain_check`` walks a long chain in forked processes, one per
stretch, while the caller goes on (``verify`` recomputes the claims meanwhile); ``verify_since_head``
proves the log extends a head written down earlier.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

from ledger.store import merkle
from ledger.store.base import Database
from ledger.store.chain_report import ChainProblem, ChainReport
from ledger.store.chain_rows import entries_written
from ledger.store.chain_walk import ChainPart, merge_reports, plan_parts, walk_part
from ledger.store.models import DOMAIN_TABLES

__all__ = ["ChainCheck", "ChainProblem", "ChainReport", "ChainVerification", "ConsistencyReport"]

SPLIT_ABOVE_ROWS = 200_000  # below this one process checks the chain sooner than forking would


@dataclass(frozen=True)
class ConsistencyReport:
    ok: bool
    old_root: str
    old_size: int
    new_root: str
    new_size: int
    proof: tuple[str, ...]
    message: str


class ChainCheck:
    """A chain check under way in other processes, or done; ``result()`` is (chain, consistency report)."""

    def __init__(
        self,
        store: ChainVerification,
        since_head: tuple[str, int] | None,
        *,
        futures: list[Future] | None = None,
        done: ChainReport | None = None,
    ) -> None:
        self._store, self._since_head, self._futures, self._chain = store, since_head, futures or [], done

    def result(self) -> tuple[ChainReport, ConsistencyReport | None]:
        if self._chain is None:
            self._chain = merge_reports([future.result() for future in self._futures])
        chain, since = self._chain, self._since_head
        consistency = self._store.verify_since_head(*since, leaves=chain.leaves) if since is not None else None
        return chain, consistency


def _written(conn: Connection) -> dict[str, dict]:
    return {table_name: entries_written(conn, table_name) for table_name in DOMAIN_TABLES}


def _walk_here(conn: Connection, written: dict[str, dict], parts: int) -> ChainReport:
    """The chain walked in this process, as ``parts`` stretches one after another, merged."""
    return merge_reports([walk_part(conn, part, written) for part in plan_parts(conn, written, parts)])


def _part_in_child(url: str, part: ChainPart, written: dict[str, dict]) -> ChainReport:
    """In a forked process: a read-only connection of its own (none of the parent's is touched)."""
    from ledger.store.engine import make_engine

    db = Database(make_engine(url, read_only=True), url)
    try:
        with db.read() as conn:
            return walk_part(conn, part, written)
    finally:
        db.close()


class ChainVerification:
    """The chain walked and compared with every domain row; the consistency proofs."""

    def __init__(self, db: Database):
        self.db = db

    def verify_chain(self, parts: int = 1) -> ChainReport:
        """Recompute every leaf and entry hash, the sequence, and compare every domain row with its entry.

        ``parts`` > 1 walks the chain as that many consecutive stretches, one after another here
        (``start_chain_check`` gives each its own process): the same checks, the same report."""
        with self.db.read() as conn:
            return _walk_here(conn, _written(conn), parts)

    def start_chain_check(self, since_head: tuple[str, int] | None = None, parts: int | None = None) -> ChainCheck:
        """``verify_chain`` (and ``verify_since_head``) in forked processes, one per stretch of the chain
        (``parts``, default: one per core on a ledger of more than ``SPLIT_ABOVE_ROWS`` rows), so that the
        caller recomputes its claims meanwhile; ``result()`` waits for them. Inline on a small ledger, with
        one core, without fork, or for an in-memory database."""
        with self.db.read() as conn:
            written = _written(conn)
            total = sum(count for table in written.values() for count, _, _ in table.values())
            if parts is None:
                parts = min(4, os.cpu_count() or 1) if total > SPLIT_ABOVE_ROWS else 1
            forked = (
                parts > 1
                and "fork" in multiprocessing.get_all_start_methods()
                and self.db.engine.url.database not in (None, "", ":memory:")
            )
            if not forked:
                return ChainCheck(self, since_head, done=_walk_here(conn, written, parts))
            plan = plan_parts(conn, written, parts)
        executor = ProcessPoolExecutor(len(plan), mp_context=multiprocessing.get_context("fork"))
        try:
            futures = [executor.submit(_part_in_child, self.db.url, part, written) for part in plan]
        finally:
            executor.shutdown(wait=False)
        return ChainCheck(self, since_head, futures=futures)

    def verify_since_head(
        self, old_root: str, old_size: int, *, leaves: list[bytes] | None = None
    ) -> ConsistencyReport:
        """Prove the log only grew since a head (root, size) written down earlier.

        Leaves are recomputed from the stored payloads (or given: those ``verify_chain`` just
        recomputed); the proof is built from them and checked with the independent verifier
        against the old and the new root.
        """
        old_root = old_root.lower()  # --since-head accepts either case of hex
        leaves = self._recomputed_leaves() if leaves is None else leaves
        new_size = len(leaves)
        new_root = merkle.merkle_root(leaves).hex()
        if old_size > new_size:
            return ConsistencyReport(
                False,
                old_root,
                old_size,
                new_root,
                new_size,
                (),
                f"the log has {new_size} entries, fewer than the {old_size} of the earlier head: history was removed",
            )
        if old_size == 0:  # no consistency proof starts from the empty log (RFC 9162): its root is all there is
            ok = old_root == merkle.EMPTY_ROOT.hex()
            message = (
                f"consistent: the earlier head is the empty log, and the log has {new_size} entries now"
                if ok
                else f"INCONSISTENT: a head of 0 entries must have the empty root {merkle.EMPTY_ROOT.hex()}, not {old_root}"
            )
            return ConsistencyReport(ok, old_root, old_size, new_root, new_size, (), message)
        proof = merkle.consistency_proof(leaves, old_size, new_size)
        ok = merkle.verify_consistency(old_root, old_size, new_root, new_size, proof)
        if ok:
            message = f"consistent: the log grew from {old_size} to {new_size} entries without rewriting history"
        elif merkle.merkle_root(leaves[:old_size]).hex() != old_root:
            message = (
                f"INCONSISTENT: the first {old_size} entries now hash to "
                f"{merkle.merkle_root(leaves[:old_size]).hex()}, not {old_root}: history was rewritten"
            )
        else:
            message = "INCONSISTENT: the consistency proof does not verify"
        return ConsistencyReport(ok, old_root, old_size, new_root, new_size, tuple(p.hex() for p in proof), message)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[str]:
        """RFC 6962 consistency proof (hex) between the first old_size and new_size entries."""
        leaves = self._recomputed_leaves()
        return [p.hex() for p in merkle.consistency_proof(leaves, old_size, new_size)]

    def _recomputed_leaves(self) -> list[bytes]:
        """Leaves from the stored payloads, not the stored leaf hashes: a proof must not trust them."""
        with self.db.read() as conn:
            return [
                merkle.leaf_hash(row[0].encode("utf-8"))
                for row in conn.execute(text("SELECT payload FROM chain_entries ORDER BY seq"))
            ]
