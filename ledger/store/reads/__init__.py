"""The store's typed read side: named reads that return frozen records, one concept per module.

Every read is SQLAlchemy Core over the models' tables (bound parameters, expanding IN
lists), so it runs unchanged on SQLite and PostgreSQL. Code outside ``ledger/store``
reads through these, never through SQL of its own; ``Store.query`` is the auditor's.
"""

from ledger.store.reads.checkpoints import CheckpointReads, RecordedCheckpoint, RecordedGate
from ledger.store.reads.claims import ClaimReads, RecordedOutcome, RegisteredClaim
from ledger.store.reads.manifests import ManifestReads, RegisteredManifest, StoredRow
from ledger.store.reads.protocols import (
    RELEASE_VERSION,
    ProtocolReads,
    RecordedDeviation,
    RegisteredProtocol,
    RegistrationEntry,
)
from ledger.store.reads.readings import EvidenceContent, EvidenceReading, EvidenceReads, ExternalCounts, RowRead

__all__ = [
    "RELEASE_VERSION",
    "CheckpointReads",
    "ClaimReads",
    "EvidenceContent",
    "EvidenceReading",
    "EvidenceReads",
    "ExternalCounts",
    "ManifestReads",
    "ProtocolReads",
    "RecordedCheckpoint",
    "RecordedDeviation",
    "RecordedGate",
    "RecordedOutcome",
    "RegisteredClaim",
    "RegisteredManifest",
    "RegisteredProtocol",
    "RegistrationEntry",
    "RowRead",
    "StoredRow",
]
