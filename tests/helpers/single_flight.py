"""Operations of one call as a server makes them, and the store's rows read past its own code."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from datetime import timedelta
from typing import Any

import psycopg

from mcp_elicit.model import Operation, Principal, new_operation
from mcp_elicit.store.url import sqlite_path
from tests.helpers.clock import FakeClock
from tests.helpers.records import ALICE

METHOD = "tools/call"
TARGET = "deploy"
DIGEST = "sha256:" + "a" * 64
TTL = timedelta(hours=1)


def candidate(
    clock: FakeClock,
    principal: Principal = ALICE,
    *,
    target: str = TARGET,
    digest: str = DIGEST,
    key: str | None = None,
    ttl: timedelta = TTL,
) -> Operation:
    """A fresh operation for a call (a new id each time), as a server would make for an incoming request."""
    return new_operation(
        principal, method=METHOD, target=target, request_digest=digest, now=clock(), ttl=ttl, idempotency_key=key
    )


def rows(store_url: str, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    """Read the store's tables directly, past the store's own code (`%s` placeholders on both engines)."""
    if store_url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as connection:
            return [tuple(row) for row in connection.execute(sql.replace("%s", "?"), params).fetchall()]
    with psycopg.connect(store_url) as connection:
        return connection.execute(sql, params).fetchall()
