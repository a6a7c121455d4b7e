"""The ledger store's interface: every operation the rest of ``ledger`` asks of a ledger, in one place.

As MLflow's ``AbstractStore`` stands in front of its tracking backends, ``LedgerStore`` stands in front of
the ledger's: ``ledger.store.chain.Store`` (SQLAlchemy, on SQLite and PostgreSQL) is the implementation
here, a facade over its parts (the append-only log, the typed writers and their rules, the chain check,
the typed lookups and the auditor's read-only SQL), each a class of its own holding the shared
``Database``. What a judge reads is narrower still: ``ledger.store.evidence_source.EvidenceSource``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.store.append import AppendResult
    from ledger.store.lookups import (
        EvidenceContent,
        EvidenceReading,
        ExternalCounts,
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
    from ledger.store.read_only import Params, QueryResult
    from ledger.store.verification import ChainCheck, ChainReport, ConsistencyReport


class LedgerStore(ABC):
    """A ledger: written through its typed writers only, read through its lookups, checked as a chain."""

    @property
    @abstractmethod
    def url(self) -> str:
        """The ledger's database URL."""

    @property
    @abstractmethod
    def dialect(self) -> str:
        """The database's SQL dialect (``sqlite``, ``postgresql``)."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the shared core

    @abstractmethod
    def exclusive(self, purpose: str) -> AbstractContextManager[None]:
        """A ledger-wide lock across several write transactions (a registration is many appends)."""

    @abstractmethod
    def get(self, table_name: str, **where) -> dict | None:
        """The first row of ``table_name`` matching ``column=value`` filters, as a dict."""

    @abstractmethod
    def rows_of(self, table_name: str, **where) -> list[dict]:
        """All rows of ``table_name`` matching the filters, ordered by id (seq for chain_entries)."""

    @abstractmethod
    def get_checkpoint(self, sha256: str) -> dict | None: ...

    @abstractmethod
    def entry_data(self, kind: str) -> list[tuple[int, dict]]:
        """(seq, data) of every free chain entry of ``kind``, in chain order."""

    # ---- DomainWrites
    @abstractmethod
    def add_protocol(
        self,
        protocol: Mapping[str, Any] | Any,
        *,
        name: str | None = None,
        version: str | None = None,
    ) -> str:
        """Register a protocol (dict or Pydantic model); returns its canonical SHA-256."""

    @abstractmethod
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
        """Record a deviation from a registered protocol; returns the deviation id."""

    @abstractmethod
    def add_manifest(self, manifest, *, protocol_sha256: str | None = None) -> str:
        """Register a ``ledger.rows.manifest.Manifest`` and all its rows in one chain entry."""

    @abstractmethod
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
        """Record a run (training, evaluation, import...); returns its run id (uuid4 hex if not given)."""

    @abstractmethod
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
        """Record a checkpoint (hash of the file bytes, computed from ``path`` if not given)."""

    @abstractmethod
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
        """Record a gate result on a recorded checkpoint."""

    @abstractmethod
    def add_evidence(
        self,
        records: Iterable[Mapping[str, Any]] | Any,
        *,
        run_id: str | None = None,
        batch_size: int | None = None,
        once: bool = False,
    ) -> int:
        """Insert row-level evidence; one chain entry per call (or per ``batch_size`` rows). ``once``: nothing is
        written where the run already has evidence of the first record's manifest and checkpoint (another process
        recorded the same reading first)."""

    # ---- ClaimWrites
    @abstractmethod
    def add_claim(self, claim_id: str, spec: Any, *, protocol_sha256: str | None = None) -> str:
        """Register (preregister) a claim; returns the SHA-256 of its canonical spec."""

    @abstractmethod
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
        """Record a statistical test and the evidence it consumed."""

    @abstractmethod
    def add_claim_outcome(
        self,
        claim_id: str,
        outcome: str,
        reason: str,
        *,
        stat_test_id: str | None = None,
        detail: Any = None,
    ) -> int:
        """Record an evaluation of a claim (supported / refuted / unverifiable)."""

    # ---- AppendLog
    @abstractmethod
    def append(
        self,
        kind: str,
        payload: Mapping[str, Any] | None = None,
        records: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> AppendResult:
        """Append one chain entry (and its domain rows) in one transaction."""

    @abstractmethod
    def leaf_hashes(self) -> list[str]: ...

    @abstractmethod
    def head(self) -> tuple[str, int]:
        """(Merkle root hex, number of entries) of the log as stored."""

    # ---- StoreRules
    @abstractmethod
    def check_continuation(self, parent_sha256: str, *, child_status: str = "promoted") -> None:
        """Raise ``LineageRefused`` if a new checkpoint may not descend from ``parent_sha256``."""

    # ---- ChainVerification
    @abstractmethod
    def verify_chain(self, parts: int = 1) -> ChainReport:
        """Recompute every leaf and entry hash, the sequence, and compare every domain row with its entry."""

    @abstractmethod
    def start_chain_check(self, since_head: tuple[str, int] | None = None, parts: int | None = None) -> ChainCheck:
        """``verify_chain`` (and ``verify_since_head``) in forked processes, one per stretch of the chain
        (``parts``, default: one per core on a ledger of more than ``SPLIT_ABOVE_ROWS`` rows), so that the
        caller recomputes its claims meanwhile; ``result()`` waits for them. Inline on a small ledger, with
        one core, without fork, or for an in-memory database."""

    @abstractmethod
    def verify_since_head(
        self, old_root: str, old_size: int, *, leaves: list[bytes] | None = None
    ) -> ConsistencyReport:
        """Prove the log only grew since a head (root, size) written down earlier."""

    @abstractmethod
    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[str]:
        """RFC 6962 consistency proof (hex) between the first old_size and new_size entries."""

    # ---- SchemaCheck
    @abstractmethod
    def schema_problems(self) -> list[str]:
        """What differs from the schema of this code's migrations: tables, views, triggers, revision."""

    # ---- ProtocolReads
    @abstractmethod
    def protocols(
        self, *, sha256s: Iterable[str] | None = None, name: str | None = None, release: bool | None = None
    ) -> list[RegisteredProtocol]:
        """Registered protocols in registration order, filtered by sha256, name, and release (True) or not (False)."""

    @abstractmethod
    def protocol(self, sha256: str) -> RegisteredProtocol | None: ...

    @abstractmethod
    def deviations_to(self, new_protocol_sha256: str) -> list[RecordedDeviation]:
        """The deviations recorded on the way to a protocol version, in recording order."""

    @abstractmethod
    def registrations(self, protocol: str | None = None) -> list[RegistrationEntry]:
        """``registration`` entries in chain order (of one protocol name if given)."""

    # ---- ManifestReads
    @abstractmethod
    def manifest(self, sha256: str) -> RegisteredManifest | None: ...

    @abstractmethod
    def manifests_of(self, protocol_sha256s: Iterable[str], *, name: str | None = None) -> list[RegisteredManifest]:
        """Manifests registered by these protocols (or releases), in registration order."""

    @abstractmethod
    def manifests_with_evidence(self, protocol_sha256s: Iterable[str], *, task: str) -> list[RegisteredManifest]:
        """The protocols' manifests holding rows of ``task`` and any evidence, in registration order."""

    @abstractmethod
    def manifest_rows(self, manifest_sha256: str) -> list[StoredRow]:
        """A manifest's rows in manifest order, with their stored content and hash."""

    # ---- EvidenceReads
    @abstractmethod
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
        """Readings of one manifest, in recording order (or by row position, then loop)."""

    @abstractmethod
    def final_readings(
        self,
        manifest_sha256: str,
        *,
        protocol_sha256s: Iterable[str] | None = None,
        arm: str | None = None,
        checkpoint_sha256: str | None = None,
        run_id: str | None = None,
    ) -> list[EvidenceReading]:
        """The final reading (``ledger.store.final_reading``) of each row per (arm, checkpoint), in recording order."""

    @abstractmethod
    def has_evidence(self, run_id: str, manifest_sha256: str, checkpoint_sha256: str | None = None) -> bool:
        """Whether the run recorded any reading of the manifest (by this checkpoint, if given)."""

    @abstractmethod
    def evidence_count_of(self, protocol_sha256s: Iterable[str]) -> int:
        """How many readings runs of these protocol versions have recorded."""

    @abstractmethod
    def latest_checkpoint_on(
        self, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None = None
    ) -> str | None:
        """The arm's most recently recorded checkpoint with readings of the manifest (by these protocols' runs)."""

    @abstractmethod
    def checkpoints_on(
        self, arm: str, manifest_sha256: str, protocol_sha256s: Iterable[str] | None = None
    ) -> list[str]:
        """Every checkpoint of the arm with readings of the manifest (by these protocols' runs), in recording
        order (a training curve)."""

    @abstractmethod
    def measured_losses(
        self,
        manifest_sha256: str,
        *,
        arm: str,
        checkpoint_sha256: str,
        loop: int,
        protocol_sha256s: Iterable[str] | None = None,
    ) -> dict[str, tuple[float, int]]:
        """row id -> (nats, tokens) of a text manifest read by one checkpoint at one test recurrence (by runs
        of these protocol versions, if given)."""

    @abstractmethod
    def measured_loss_ids(
        self,
        manifest_sha256: str,
        *,
        arm: str,
        checkpoint_sha256: str,
        loop: int,
        protocol_sha256s: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """row id -> the evidence id ``measured_losses`` read that row's (nats, tokens) from."""

    @abstractmethod
    def evidence_details(self, evidence_ids: Iterable[int]) -> dict[int, dict]:
        """evidence id -> its ``detail_json`` parsed (readings without one are left out)."""

    @abstractmethod
    def rows_read(self) -> list[RowRead]:
        """Every (protocol version, manifest, row) some run has evidence on, imported releases included."""

    @abstractmethod
    def readings_by_version(self, protocol_sha256s: Iterable[str]) -> list[VersionReadings]:
        """Per protocol version and manifest: the readings its runs recorded and the distinct rows they read."""

    @abstractmethod
    def evidence_contents(self, protocol_sha256: str) -> list[EvidenceContent]:
        """A protocol's readings without latency, in a fixed order (what reruns must reproduce)."""

    @abstractmethod
    def external_counts(self) -> list[ExternalCounts]:
        """Every imported per-depth summary, in chain order."""

    # ---- CheckpointReads
    @abstractmethod
    def checkpoint(self, sha256: str) -> RecordedCheckpoint | None: ...

    @abstractmethod
    def checkpoints(self, sha256s: Iterable[str]) -> list[RecordedCheckpoint]:
        """These checkpoints in recording order."""

    @abstractmethod
    def checkpoint_meta(self, sha256s: Iterable[str]) -> dict[str, dict]:
        """The recorded meta (training record: steps, losses, FLOPs, ...) of these checkpoints; {} where none."""

    @abstractmethod
    def checkpoints_of_run(self, run_id: str, *, stage: str | None = None) -> list[RecordedCheckpoint]:
        """The run's checkpoints (of one stage, if given) in recording order: the last is the latest."""

    @abstractmethod
    def checkpoints_in_scope(self, protocol_sha256s: Iterable[str]) -> set[str]:
        """Checkpoints recorded by these protocols' runs, and those their runs' evidence names."""

    @abstractmethod
    def gate_results(self, checkpoint_sha256s: Iterable[str]) -> list[RecordedGate]:
        """Gate results recorded on these checkpoints, in recording order."""

    @abstractmethod
    def latest_gate_verdict(self, gate: str, arm: str, protocol_sha256s: Iterable[str]) -> bool | None:
        """Whether ``gate`` last passed on one of the arm's checkpoints in scope (None if never recorded)."""

    @abstractmethod
    def lineage(self, sha256: str) -> list[dict]:
        """The checkpoint and its ancestors, nearest first (generation 0 = itself), as ``v_lineage`` rows."""

    # ---- ClaimReads
    @abstractmethod
    def claims(self, claim_id: str | None = None) -> list[RegisteredClaim]:
        """Registered claims in registration order (the one with ``claim_id``, if given)."""

    @abstractmethod
    def claim(self, claim_id: str) -> RegisteredClaim | None: ...

    @abstractmethod
    def claim_outcomes(self) -> list[RecordedOutcome]:
        """Every recorded outcome in recording order: a claim's first is its first recorded outcome."""

    @abstractmethod
    def first_outcome(self, claim_id: str) -> dict | None: ...

    # ---- ReadOnlySQL
    @abstractmethod
    def query(
        self, sql: str, params: Params = None, *, read_only: bool = True, timeout_s: float | None = None
    ) -> QueryResult:
        """Run one SQL statement and return its rows."""

    @abstractmethod
    def query_df(self, sql: str, params: Params = None):
        """``query`` as a pandas DataFrame (read-only)."""
