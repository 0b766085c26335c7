"""Editing a store's audit trail by hand, as someone with write access to the database would, outside any `Store`."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from typing import Any

import psycopg

from mcp_elicit.store import Store
from mcp_elicit.store.audit import SealedRow
from mcp_elicit.store.url import sqlite_path

Statement = tuple[str, Sequence[object]]


def run_sql(store_url: str, statements: Sequence[Statement]) -> list[list[Any]]:
    """Run `statements` (`%s` parameters) in one transaction; each one's rows, if it returns any."""
    results: list[list[Any]] = []
    if store_url.startswith("sqlite"):
        with closing(sqlite3.connect(sqlite_path(store_url))) as lite, lite:
            for sql, params in statements:
                cursor = lite.execute(sql.replace("%s", "?"), params)
                results.append(cursor.fetchall() if cursor.description else [])
    else:
        with psycopg.connect(store_url, autocommit=True) as pg, pg.transaction():
            for sql, params in statements:
                found = pg.execute(sql, params)
                results.append(found.fetchall() if found.description else [])
    return results


def chain_rows(store: Store, chain: str) -> list[SealedRow]:
    """The chain's rows as stored, in their chain's order."""
    rows = [row for row in store.audit_export(limit=100_000) if row.entry.subject_id == chain]
    return sorted(rows, key=lambda row: row.chain_seq or 0)


def rehashed(rows: Sequence[SealedRow], reason_at: int, reason: str) -> list[Statement]:
    """The "recompute hashes" attack: the reason at `reason_at` edited, and that row and every later one given the
    hashes and links the edit calls for, the head moved to match."""
    statements: list[Statement] = []
    previous = rows[0].prev_hash or ""
    for row in rows:
        assert row.chain_seq is not None
        chained = row.chained()
        if row.chain_seq >= reason_at:
            edited = reason if row.chain_seq == reason_at else row.entry.reason
            chained = dataclasses.replace(chained, reason=edited, prev_hash=previous)
            statements.append(
                (
                    "UPDATE elicit_audit SET reason = %s, prev_hash = %s, row_hash = %s WHERE seq = %s",
                    (edited, previous, chained.digest(), row.entry.seq),
                )
            )
        previous = chained.digest() if row.chain_seq >= reason_at else (row.row_hash or "")
    statements.append(
        ("UPDATE elicit_audit_heads SET row_hash = %s WHERE chain = %s", (previous, rows[0].entry.subject_id))
    )
    return statements


def cut_back(store_url: str, checkpoint_id: int) -> list[str]:
    """The attack on recent history without the key: checkpoints from `checkpoint_id` on deleted with their heads,
    the rows they sealed unsealed, and the chains' heads put back as the checkpoints before left them, so that
    the rows can be edited and the sealer signs them again. The chains those checkpoints moved."""
    [moved] = run_sql(
        store_url,
        [("SELECT DISTINCT chain FROM elicit_audit_checkpoint_heads WHERE checkpoint_id >= %s", (checkpoint_id,))],
    )
    statements: list[Statement] = []
    for (chain,) in moved:
        [before] = run_sql(
            store_url,
            [("SELECT chain_seq, row_hash FROM elicit_audit_checkpoint_heads WHERE chain = %s AND checkpoint_id < %s"
              " ORDER BY checkpoint_id DESC LIMIT 1", (chain, checkpoint_id))],
        )  # fmt: skip
        kept = before[0][0] if before else 0
        statements.append(
            ("UPDATE elicit_audit SET chain_seq = NULL, prev_hash = NULL, row_hash = NULL"
             " WHERE subject_id = %s AND chain_seq > %s", (chain, kept))
        )  # fmt: skip
        if before:
            statements.append(
                ("UPDATE elicit_audit_heads SET chain_seq = %s, row_hash = %s WHERE chain = %s", (*before[0], chain))
            )
        else:
            statements.append(("DELETE FROM elicit_audit_heads WHERE chain = %s", (chain,)))
    statements += [
        ("DELETE FROM elicit_audit_checkpoint_heads WHERE checkpoint_id >= %s", (checkpoint_id,)),
        ("DELETE FROM elicit_audit_checkpoints WHERE checkpoint_id >= %s", (checkpoint_id,)),
    ]
    run_sql(store_url, statements)
    return [chain for (chain,) in moved]
