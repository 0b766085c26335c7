"""Rows damaged behind the store's back, as a crash, a bad restore or a hand edit would leave them."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import psycopg

from mcp_elicit.model import Operation
from mcp_elicit.store.url import sqlite_path


def corrupt(store_url: str, sql: str) -> None:
    if store_url.startswith("sqlite:"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as connection:
            connection.execute(sql)
            connection.commit()
    else:
        with psycopg.connect(store_url, autocommit=True) as connection:
            connection.execute(sql)


def corrupt_operation(store_url: str, operation: Operation) -> str:
    """Damage one operation row; what its report says of it. A PostgreSQL JSONB column holds only JSON and a
    CHECK keeps the status valid, so there the status is damaged, its CHECK dropped first."""
    if store_url.startswith("sqlite:"):
        corrupt(
            store_url, f"UPDATE elicit_operations SET result = '{{nope' WHERE operation_id = '{operation.operation_id}'"
        )
        return "column result holds invalid JSON"
    corrupt(store_url, "ALTER TABLE elicit_operations DROP CONSTRAINT elicit_operations_status_check")
    corrupt(
        store_url, f"UPDATE elicit_operations SET status = 'approved' WHERE operation_id = '{operation.operation_id}'"
    )
    return "column status holds 'approved', not one of: open, completed"
