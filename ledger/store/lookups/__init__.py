"""The store's typed read side: named reads that return frozen records, one concept per module.

Every read is SQLAlchemy Core over the models' tables (bound parameters, expanding IN
lists), so it runs unchanged on SQLite and PostgreSQL. Code outside ``ledger/store``
reads through these, never through SQL of its own; ``Store.query`` is the auditor's.
"""

from ledger.store.lookups.checkpoints import CheckpointReads, RecordedCheckpoint, RecordedGate
from ledger.store.lookups.claims import ClaimReads, RecordedOutcome, RegisteredClaim
from ledger.store.lookups.manifests import ManifestReads, RegisteredManifest, StoredRow
from ledger.store.lookups.protocols import (
    RELEASE_VERSION,
    ProtocolReads,
    RecordedDeviation,
    RegisteredProtocol,
    RegistrationEntry,
)
from ledger.store.lookups.readings import EvidenceContent, EvidenceReading, EvidenceReads, ExternalCounts, RowRead

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
