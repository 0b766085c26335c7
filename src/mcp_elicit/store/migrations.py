"""The store's schema by version, for whoever builds a database other than by opening the store on it.

Opening a store creates and migrates its schema (`open_store(url)`, `migrate=True`). These are for the
other ways: a database administrator who applies the migrations by hand where the serving role may not
change tables (it then opens with `migrate=False`), or a test that builds a database as an older release
left it, to see this code migrate it or refuse it.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from mcp_elicit.store import _schema

SCHEMA_VERSION = _schema.LATEST_VERSION
"""The schema version this code reads and writes: what `Store.schema_version()` answers once opened, and
what `MigrationPending` and `SchemaTooNew` compare a database's version with."""

Engine: TypeAlias = Literal["sqlite", "postgresql"]

_TYPES: dict[Engine, _schema.Types] = {"sqlite": _schema.SQLITE_TYPES, "postgresql": _schema.POSTGRES_TYPES}


def schema_statements(engine: Engine, *, since: int = 0, until: int = SCHEMA_VERSION) -> list[str]:
    """The statements that take an `engine` database from schema version `since` (0: empty) to `until`.

    Each migration is followed by its row in `elicit_schema`, as opening the store writes it; run them in
    order, in one transaction.
    """
    if engine not in _TYPES:
        raise ValueError(f"no schema for the engine {engine!r}: sqlite or postgresql")
    if not 0 <= since <= until <= SCHEMA_VERSION:
        raise ValueError(f"schema versions run from 0 to {SCHEMA_VERSION}; {since} to {until} is not a way up")
    script = ["CREATE TABLE IF NOT EXISTS elicit_schema (version INTEGER NOT NULL)"] if since == 0 else []
    for version in range(since + 1, until + 1):
        script += _schema.statements(version, _TYPES[engine])
        script.append(f"INSERT INTO elicit_schema (version) VALUES ({version})")
    return script
