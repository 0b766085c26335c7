"""Taking a store back to an older schema by hand, as a store written by an older release would be found."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing

import psycopg

from mcp_elicit.store.url import sqlite_path

SINCE_SCHEMA_10 = (
    "DROP TABLE elicit_audit_origin",
    "DROP TABLE elicit_audit_checkpoint_heads",
    "DROP TABLE elicit_audit_checkpoints",
    "DROP TABLE elicit_audit_heads",
    "DROP INDEX elicit_audit_chain",
    "DROP INDEX elicit_audit_unsealed",
    "ALTER TABLE elicit_audit DROP COLUMN row_hash",
    "ALTER TABLE elicit_audit DROP COLUMN prev_hash",
    "ALTER TABLE elicit_audit DROP COLUMN chain_seq",
    "DELETE FROM elicit_schema WHERE version = 11",
)
"""What schema 11 added (the audit's chains, heads and checkpoints), taken back."""

SINCE_SCHEMA_9 = (
    *SINCE_SCHEMA_10,
    "DROP TABLE elicit_votes",
    "DROP INDEX elicit_decisions_approvals",
    "ALTER TABLE elicit_decisions DROP COLUMN approvers",
    "DELETE FROM elicit_schema WHERE version = 10",
)
"""What schemas 10 (approvers and their votes) and 11 added, taken back."""


def take_back(store_url: str, statements: Sequence[str]) -> None:
    """Run `statements` on the store at `store_url` in one transaction, outside any `Store`."""
    if store_url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as lite, lite:
            for statement in statements:
                lite.execute(statement)
    else:
        with psycopg.connect(store_url, autocommit=True) as pg, pg.transaction():
            for statement in statements:
                pg.execute(statement)
