"""The store: the append-only log, its typed writers and rules, typed reads, and chain verification.

``Store`` implements ``LedgerStore`` (``ledger.store.interface``) as a facade over one part per concept,
each holding the shared ``Database`` (``base.py``: the engine and its transactions):

* ``append.AppendLog`` -- the one write path (``append``) and the Merkle head;
* ``writes.DomainWrites`` -- typed writers (``add_protocol``, ``add_evidence``, ...), with
  ``claim_writes.ClaimWrites`` for claims, statistical tests and outcomes;
* ``rules.StoreRules`` -- preregistration of evidence and the lineage rule;
* ``verification.ChainVerification`` -- ``verify_chain`` and ``verify_since_head``;
* ``lookups`` -- the typed read side (protocols, manifests, readings, checkpoints, claims);
* ``read_only.ReadOnlySQL`` -- ``query``, the auditor's read-only SQL.

See docs/schema.md for the chain construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from ledger.store.append import AppendLog, AppendResult
from ledger.store.base import Database
from ledger.store.claim_writes import ClaimWrites
from ledger.store.engine import (
    StoreError,
    _sqlite_file,
    check_connection,
    database_refusal,
    default_db_url,
    display_url,
    ensure_schema,
    is_sqlite,
    make_engine,
    normalize_url,
)
from ledger.store.interface import LedgerStore
from ledger.store.lookups import (
    CheckpointReads,
    ClaimReads,
    EvidenceContent,
    EvidenceReading,
    EvidenceReads,
    ExternalCounts,
    ManifestReads,
    ProtocolReads,
    RecordedCheckpoint,
    RecordedDeviation,
    RecordedGate,
    RecordedOutcome,
    RegisteredClaim,
    RegisteredManifest,
    RegisteredProtocol,
    RegistrationEntry,
    RowRead,
    StoredRow,
)
from ledger.store.lookups.readings import VersionReadings
from ledger.store.read_only import (
    InvalidQuery,
    Params,
    QueryResult,
    QueryTimeout,
    ReadOnlySQL,
    ReadOnlyViolation,
    check_read_only_sql,
)
from ledger.store.records import entry_hash, payload_leaf_hash, utc_now
from ledger.store.rules import ConflictError, LineageRefused, PreregistrationRequired, StoreRules
from ledger.store.schema_check import SchemaCheck
from ledger.store.verification import ChainCheck, ChainProblem, ChainReport, ChainVerification, ConsistencyReport
from ledger.store.writes import DomainWrites

__all__ = [
    "AppendResult",
    "ChainProblem",
    "ChainReport",
    "ConflictError",
    "ConsistencyReport",
    "InvalidQuery",
    "LineageRefused",
    "PreregistrationRequired",
    "QueryResult",
    "QueryTimeout",
    "ReadOnlyViolation",
    "Store",
    "check_read_only_sql",
    "entry_hash",
    "open_store",
    "payload_leaf_hash",
    "utc_now",
]


class Store(LedgerStore):
    """A ledger database: the facade over its parts, which share one ``Database``. Create with ``open_store(url)``."""

    def __init__(self, engine: Engine, url: str):
        self.db = Database(engine, url)
        self.log = AppendLog(self.db)
        self.rules = StoreRules(self.db)
        self.writes = DomainWrites(self.db, self.log, self.rules)
        self.claim_writes = ClaimWrites(self.db, self.log)
        self.chain = ChainVerification(self.db)
        self.schema = SchemaCheck(self.db)
        self.protocol_lookups = ProtocolReads(self.db)
        self.manifest_lookups = ManifestReads(self.db)
        self.evidence_lookups = EvidenceReads(self.db)
        self.checkpoint_lookups = CheckpointReads(self.db)
        self.claim_lookups = ClaimReads(self.db)
        self.sql = ReadOnlySQL(self.db)

    @property
    def engine(self) -> Engine:
        return self.db.engine

    @property
    def url(self) -> str:
        return self.db.url

    @property
    def dialect(self) -> str:
        return self.db.dialect

    def close(self) -> None:
        self.db.close()

    # ---- the shared core (Database)
    def exclusive(self, purpose: str) -> AbstractContextManager[None]:
        return self.db.exclusive(purpose)

    def get(self, table_name: str, **where) -> dict | None:
        return self.db.get(table_name, **where)

    def rows_of(self, table_name: str, **where) -> list[dict]:
        return self.db.rows_of(table_name, **where)

    def get_checkpoint(self, sha256: str) -> dict | None:
        return self.db.get_checkpoint(sha256)

    def entry_data(self, kind: str) -> list[tuple[int, dict]]:
        return self.db.entry_data(kind)

    # ---- DomainWrites (writes)
    def add_protocol(
        self,
        protocol: Mapping[str, Any] | Any,
        *,
        name: str | None = None,
        version: str | None = None,
    ) -> str:
        return self.writes.add_protocol(protocol, name=name, version=version)

    def add_deviation(
        self,
        protocol_sha256: str,
        *,
        item: str,
        planned: Any,
        actual: Any,
        reason: str,
        timing: str,
        new_protocol_sha256: str | None = None,
    ) -> int:
        return self.writes.add_deviation(
            protocol_sha256,
            item=item,
            planned=planned,
            actual=actual,
            reason=reason,
            timing=timing,
            new_protocol_sha256=new_protocol_sha256,
        )

    def add_manifest(self, manifest, *, protocol_sha256: str | None = None) -> str:
        return self.writes.add_manifest(manifest, protocol_sha256=protocol_sha256)

    def add_run(
        self,
        *,
        run_id: str | None = None,
        kind: str = "eval",
        protocol_sha256: str | None = None,
        arm: str | None = None,
        config: Any = None,
        environment: Any = None,
        rng: Any = None,
        note: str | None = None,
    ) -> str:
        return self.writes.add_run(
            run_id=run_id,
            kind=kind,
            protocol_sha256=protocol_sha256,
            arm=arm,
            config=config,
            environment=environment,
            rng=rng,
            note=note,
        )

    def add_checkpoint(
        self,
        *,
        arm: str,
        status: str,
        sha256: str | None = None,
        path: str | None = None,
        parent_sha256: str | None = None,
        run_id: str | None = None,
        stage: str | None = None,
        gate_results: Sequence[Mapping[str, Any]] | None = None,
        meta: Any = None,
    ) -> str:
        return self.writes.add_checkpoint(
            arm=arm,
            status=status,
            sha256=sha256,
            path=path,
            parent_sha256=parent_sha256,
            run_id=run_id,
            stage=stage,
            gate_results=gate_results,
            meta=meta,
        )

    def add_gate_result(
        self,
        checkpoint_sha256: str,
        gate: str,
        passed: bool,
        *,
        value: float | None = None,
        threshold: float | None = None,
        comparison: str | None = None,
        metric: str | None = None,
        run_id: str | None = None,
        detail: Any = None,
        action: str = "stop",
    ) -> int:
        return self.writes.add_gate_result(
            checkpoint_sha256,
            gate,
            passed,
            value=value,
            threshold=threshold,
            comparison=comparison,
            metric=metric,
            run_id=run_id,
            detail=detail,
            action=action,
        )

    def add_evidence(
        self,
        records: Iterable[Mapping[str, Any]] | Any,
        *,
        run_id: str | None = None,
        batch_size: int | None = None,
        once: bool = False,
    ) -> int:
        return self.writes.add_evidence(records, run_id=run_id, batch_size=batch_size, once=once)

    # ---- ClaimWrites (claim_writes)
    def add_claim(self, claim_id: str, spec: Any, *, protocol_sha256: str | None = None) -> str:
        return self.claim_writes.add_claim(claim_id, spec, protocol_sha256=protocol_sha256)

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
        return self.claim_writes.add_stat_test(
            statistic=statistic,
            inputs=inputs,
            claim_id=claim_id,
            test_id=test_id,
            method=method,
            n=n,
            estimate=estimate,
            ci_low=ci_low,
            ci_high=ci_high,
            p_value=p_value,
            params=params,
            result=result,
            evidence_ids=evidence_ids,
        )

    def add_claim_outcome(
        self,
        claim_id: str,
        outcome: str,
        reason: str,
        *,
        stat_test_id: str | None = None,
        detail: Any = None,
    ) -> int:
        return self.claim_writes.add_claim_outcome(claim_id, outcome, reason, stat_test_id=stat_test_id, detail=detail)

    # ---- AppendLog (log)
    def append(
        self,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        records: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> AppendResult:
        return self.log.append(kind, payload, records)

    def leaf_hashes(self) -> list[str]:
        return self.log.leaf_hashes()

    def head(self) -> tuple[str, int]:
        return self.log.head()

    # ---- StoreRules (rules)
    def check_continuation(self, parent_sha256: str, *, child_status: str = "promoted") -> None:
        return self.rules.check_continuation(parent_sha256, child_status=child_status)

    # ---- ChainVerification (chain)
    def verify_chain(self, parts: int = 1) -> ChainReport:
        return self.chain.verify_chain(parts)

    def start_chain_check(self, since_head: tuple[str, int] | None = None, parts: int | None = None) -> ChainCheck:
        return self.chain.start_chain_check(since_head, parts)

    def verify_since_head(
        self, old_root: str, old_size: int, *, leaves: list[bytes] | None = None
    ) -> ConsistencyReport:
        return self.chain.verify_since_head(old_root, old_size, leaves=leaves)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[str]:
        return self.chain.consistency_proof(old_size, new_size)

    # ---- SchemaCheck (schema)
    def schema_problems(self) -> list[str]:
        return self.schema.schema_problems()

    # ---- ProtocolReads (protocol_lookups)
    def protocols(
        self, *, sha256s: Iterable[str] | None = None, name: str | None = None, release: bool | None = None
    ) -> list[RegisteredProtocol]:
        return self.protocol_lookups.protocols(sha256s=sha256s, name=name, release=release)

    def protocol(self, sha256: str) -> RegisteredProtocol | None:
        return self.protocol_lookups.protocol(sha256)

    def deviations_to(self, new_protocol_sha256: str) -> list[RecordedDeviation]:
        return self.protocol_lookups.deviations_to(new_protocol_sha256)

    def registrations(self, protocol: str | None = None) -> list[RegistrationEntry]:
        return self.protocol_lookups.registrations(protocol)

    # ---- ManifestReads (manifest_lookups)
    def manifest(self, sha256: str) -> RegisteredManifest | None:
        return self.manifest_lookups.manifest(sha256)

    def manifests_of(self, protocol_sha256s: Iterable[str], *, name: str | None = None) -> list[RegisteredManifest]:
        return self.manifest_lookups.manifests_of(protocol_sha256s, name=name)

    def manifests_with_evidence(self, protocol_sha256s: Iterable[str], *, task: str) -> list[RegisteredManifest]:
        return self.manifest_lookups.manifests_with_evidence(protocol_sha256s, task=task)

    def manifest_rows(self, manifest_sha256: str) -> list[StoredRow]:
        return self.manifest_lookups.manifest_rows(manifest_sha256)

    # ---- EvidenceReads (evidence_lookups)
    def readings(
        self,
        manifest_sha256: str,
        *,
        protocol_sha256s: Iterable[str] | None = None,
        arm: str | None = None,
        checkpoint_sha256: str | None = None,
        run_id: str | None = None,
        loop: int | None = None,
        in_manifest_order: bool = False,
    ) -> list[EvidenceReading]:
        return self.evidence_lookups.readings(
            manifest_sha256,
            protocol_sha256s=protocol_sha256s,
            arm=arm,
            checkpoint_sha256=checkpoint_sha256,
            run_id=run_id,
            loop=loop,
            in_manifest_order=in_manifest_order,
        )

    def final_readings(
        self,
        manifest_sha256: str,
        *,
        protocol_sha256s: Iterable[str] | None = None,
        arm: str | None = None,
        checkpoint_sha256: str | None = None,
        run_id: str | None = None,
    ) -> list[EvidenceReading]:
        return self.evidence_lookups.final_readings(
            manifest_sha256,
            protocol_sha256s=protocol_sha256s,
            arm=arm,
            checkpoint_sha256=checkpoint_sha256,
            run_id=run_id,
        )

    def has_evidence(self, run_id: str, manifest_sha256: str, checkpoint_sha256: str | None = None) -> bool:
        return self.evidence_lookups.has_evidence(run_id, manifest_sha256, checkpoint_sha256)

    def evidence_count_of(self, protocol_sha256s: Iterable[str]) -> int:
        return self.evidence_lookups.evidence_count_of(protocol_sha256s)

    def latest_checkpoint_on(
        self, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None = None
    ) -> str | None:
        return self.evidence_lookups.latest_checkpoint_on(arm, manifest_sha256, protocol_sha256s)

    def checkpoints_on(
        self, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None = None
    ) -> list[str]:
        return self.evidence_lookups.checkpoints_on(arm, manifest_sha256, protocol_sha256s)

    def measured_losses(
        self,
        manifest_sha256: str,
        *,
        arm: str,
        checkpoint_sha256: str,
        loop: int,
        protocol_sha256s: Iterable[str] | None = None,
    ) -> dict[str, tuple[float, int]]:
        return self.evidence_lookups.measured_losses(
            manifest_sha256, arm=arm, checkpoint_sha256=checkpoint_sha256, loop=loop, protocol_sha256s=protocol_sha256s
        )

    def measured_loss_ids(
        self,
        manifest_sha256: str,
        *,
        arm: str,
        checkpoint_sha256: str,
        loop: int,
        protocol_sha256s: Iterable[str] | None = None,
    ) -> dict[str, int]:
        return self.evidence_lookups.measured_loss_ids(
            manifest_sha256, arm=arm, checkpoint_sha256=checkpoint_sha256, loop=loop, protocol_sha256s=protocol_sha256s
        )

    def evidence_details(self, evidence_ids: Iterable[int]) -> dict[int, dict]:
        return self.evidence_lookups.evidence_details(evidence_ids)

    def rows_read(self) -> list[RowRead]:
        return self.evidence_lookups.rows_read()

    def readings_by_version(self, protocol_sha256s: Iterable[str]) -> list[VersionReadings]:
        return self.evidence_lookups.readings_by_version(protocol_sha256s)

    def evidence_contents(self, protocol_sha256: str) -> list[EvidenceContent]:
        return self.evidence_lookups.evidence_contents(protocol_sha256)

    def external_counts(self) -> list[ExternalCounts]:
        return self.evidence_lookups.external_counts()

    # ---- CheckpointReads (checkpoint_lookups)
    def checkpoint(self, sha256: str) -> RecordedCheckpoint | None:
        return self.checkpoint_lookups.checkpoint(sha256)

    def checkpoints(self, sha256s: Iterable[str]) -> list[RecordedCheckpoint]:
        return self.checkpoint_lookups.checkpoints(sha256s)

    def checkpoint_meta(self, sha256s: Iterable[str]) -> dict[str, dict]:
        return self.checkpoint_lookups.checkpoint_meta(sha256s)

    def checkpoints_of_run(self, run_id: str, *, stage: str | None = None) -> list[RecordedCheckpoint]:
        return self.checkpoint_lookups.checkpoints_of_run(run_id, stage=stage)

    def checkpoints_in_scope(self, protocol_sha256s: Iterable[str]) -> set[str]:
        return self.checkpoint_lookups.checkpoints_in_scope(protocol_sha256s)

    def gate_results(self, checkpoint_sha256s: Iterable[str]) -> list[RecordedGate]:
        return self.checkpoint_lookups.gate_results(checkpoint_sha256s)

    def latest_gate_verdict(self, gate: str, arm: str, protocol_sha256s: Iterable[str]) -> bool | None:
        return self.checkpoint_lookups.latest_gate_verdict(gate, arm, protocol_sha256s)

    def lineage(self, sha256: str) -> list[dict]:
        return self.checkpoint_lookups.lineage(sha256)

    # ---- ClaimReads (claim_lookups)
    def claims(self, claim_id: str | None = None) -> list[RegisteredClaim]:
        return self.claim_lookups.claims(claim_id)

    def claim(self, claim_id: str) -> RegisteredClaim | None:
        return self.claim_lookups.claim(claim_id)

    def claim_outcomes(self) -> list[RecordedOutcome]:
        return self.claim_lookups.claim_outcomes()

    def first_outcome(self, claim_id: str) -> dict | None:
        return self.claim_lookups.first_outcome(claim_id)

    # ---- ReadOnlySQL (sql)
    def query(
        self, sql: str, params: Params = None, *, read_only: bool = True, timeout_s: float | None = None
    ) -> QueryResult:
        return self.sql.query(sql, params, read_only=read_only, timeout_s=timeout_s)

    def query_df(self, sql: str, params: Params = None):
        return self.sql.query_df(sql, params)


@contextmanager
def open_other_ledgers(urls: Iterable[str]) -> Iterator[tuple[Store, ...]]:
    """Other ledgers (a team's tuning ledgers, ``--also-db``), read-only, closed on exit; a missing or unreadable
    one raises ``StoreError`` (or ``DatabaseUnavailable``) naming it."""
    opened: list[Store] = []
    try:
        for url in urls:
            try:
                opened.append(open_store(url, read_only=True))
            except StoreError as exc:
                raise StoreError(f"--also-db {display_url(url)}: {exc}") from None
        yield tuple(opened)
    finally:
        for store in opened:
            store.close()


def open_store(url: str | None = None, create: bool = True, *, read_only: bool = False) -> Store:
    """Open (and for a new database, create) the ledger at ``url`` (default ``default_db_url()``).

    A new database is migrated to the current schema; an existing one must already be at
    it, else ``SchemaVersionMismatch`` says what to run. With ``create=False`` a SQLite
    file that does not exist is refused before anything touches the disk. A URL that
    cannot be used or a server that cannot be reached raises ``DatabaseUnavailable``.
    ``read_only`` (implies ``create=False``): the engine cannot write (``make_engine``).
    """
    create = create and not read_only
    url = normalize_url(url) if url is not None else default_db_url()
    if not create and is_sqlite(url):
        path = _sqlite_file(url)
        if path is not None and not Path(path).is_file():
            shown = display_url(url)
            raise StoreError(f"no ledger database at {shown}: create one with `ledger db upgrade --db {shown}`")
    engine = make_engine(url, read_only=read_only)
    try:
        check_connection(engine, url)
        ensure_schema(engine, url=url, create=create)
    except DBAPIError as error:  # e.g. SQLite's "file is not a database"
        engine.dispose()
        raise StoreError(f"cannot be read as a ledger database: {database_refusal(error)}") from None
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, url)
