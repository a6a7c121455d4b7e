"""The ledger's store: SQLAlchemy models, an append-only hash chain, a Merkle log, typed reads, auditor views.

    from ledger.store import open_store
    store = open_store()                      # $LEDGER_DB or sqlite:///runs/ledger.db
    sha = store.add_protocol(protocol_dict)   # every write appends one chain entry
    store.final_readings(manifest_sha)        # typed reads (ledger/store/lookups/)
    root, size = store.head()                 # Merkle head of the log
    report = store.verify_chain()             # recompute every hash, compare every row
    store.verify_since_head(root, size)       # the log only grew since that head
    store.query("SELECT * FROM v_accuracy_by_arm_depth")   # the auditor's read-only SQL

See docs/schema.md for the tables, the chain construction and the views.
"""

from ledger.store.chain import (
    AppendResult,
    ChainProblem,
    ChainReport,
    ConflictError,
    ConsistencyReport,
    InvalidQuery,
    LineageRefused,
    PreregistrationRequired,
    QueryResult,
    QueryTimeout,
    ReadOnlyViolation,
    Store,
    check_read_only_sql,
    entry_hash,
    open_other_ledgers,
    open_store,
    utc_now,
)
from ledger.store.engine import (
    DatabaseUnavailable,
    SchemaVersionMismatch,
    StoreError,
    current_revision,
    database_refusal,
    default_db_url,
    display_url,
    head_revision,
    make_engine,
    upgrade,
)
from ledger.store.final_reading import FINAL_CASES, choose_final, final_rank
from ledger.store.merkle import consistency_proof, merkle_root, merkle_root_hex, verify_consistency
from ledger.store.models import ALL_TABLES, DOMAIN_TABLES, GENESIS_HASH
from ledger.store.views import VIEW_NAMES, views_as_dataframes

__all__ = [
    "ALL_TABLES",
    "DOMAIN_TABLES",
    "FINAL_CASES",
    "GENESIS_HASH",
    "VIEW_NAMES",
    "AppendResult",
    "ChainProblem",
    "ChainReport",
    "ConflictError",
    "ConsistencyReport",
    "DatabaseUnavailable",
    "InvalidQuery",
    "LineageRefused",
    "PreregistrationRequired",
    "QueryResult",
    "QueryTimeout",
    "ReadOnlyViolation",
    "SchemaVersionMismatch",
    "Store",
    "StoreError",
    "check_read_only_sql",
    "choose_final",
    "consistency_proof",
    "current_revision",
    "database_refusal",
    "default_db_url",
    "display_url",
    "entry_hash",
    "final_rank",
    "head_revision",
    "make_engine",
    "merkle_root",
    "merkle_root_hex",
    "open_other_ledgers",
    "open_store",
    "upgrade",
    "utc_now",
    "verify_consistency",
    "views_as_dataframes",
]
