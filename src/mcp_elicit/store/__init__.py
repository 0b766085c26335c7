"""Durable storage of operations, decisions, their journal, audit trail, single-use tokens and sealed vault blobs."""

from mcp_elicit.store.errors import (
    AlreadyExists,
    DecisionConflict,
    DecisionExpired,
    NotFound,
    OperationConflict,
    OperationExpired,
    RecordExpired,
    SchemaTooNew,
    StoreConfigError,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    TransitionConflict,
)
from mcp_elicit.store.protocol import Clock, Consumption, JournalEntry, Store, SweepResult, VaultRecord
from mcp_elicit.store.url import ENV_VAR, default_store_path, default_store_url, open_store, utc_now

__all__ = [
    "ENV_VAR",
    "AlreadyExists",
    "Clock",
    "Consumption",
    "DecisionConflict",
    "DecisionExpired",
    "JournalEntry",
    "NotFound",
    "OperationConflict",
    "OperationExpired",
    "RecordExpired",
    "SchemaTooNew",
    "Store",
    "StoreConfigError",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "SweepResult",
    "TransitionConflict",
    "VaultRecord",
    "default_store_path",
    "default_store_url",
    "open_store",
    "utc_now",
]
