"""What both benchmarks share: backend selection, throwaway PostgreSQL schemas, the fixture records.

Each run gets a schema of its own, dropped afterwards, so a benchmark never touches anything else in
the database and two runs never see each other's rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from mcp_elicit.model import JSONObject, JSONValue, Operation, Principal, new_operation, request_digest

PG_ENV_VAR = "MCP_ELICIT_BENCH_PG"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
PRINCIPAL = Principal("bench-user", "bench-client")
FORM_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve"],
}

INSERT_DECISION = (
    "INSERT INTO elicit_decisions (elicitation_id, operation_id, key, principal_id, client_id, origin_method, "
    "origin_request_digest, mode, status, resume_policy, message, requested_schema, url, sensitive_fields, content, "
    "completion_version, created_at, updated_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "%s, %s, %s, %s, %s, %s, %s, %s)"
)
INSERT_AUDIT = (
    "INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one engine's driver receives timestamps and JSON, exactly as the store encodes them."""

    time: Callable[[datetime], object]
    json: Callable[[JSONValue], object]


def _sqlite_time(value: datetime) -> object:
    return (value - _EPOCH) // _MICROSECOND


def _sqlite_json(value: JSONValue) -> object:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _pg_time(value: datetime) -> object:
    return value


SQLITE = Dialect(time=_sqlite_time, json=_sqlite_json)
POSTGRES = Dialect(time=_pg_time, json=Jsonb)


def qmark(sql: str) -> str:
    return sql.replace("%s", "?")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_ENV_VAR, DEFAULT_PG_URL),
        help=f"PostgreSQL server to create a throwaway schema in (env {PG_ENV_VAR}; default %(default)s)",
    )


def select_backends(backend: str, pg_url: str) -> list[str] | None:
    """The backends to run; None when PostgreSQL was asked for by name and cannot be reached."""
    wanted = ["sqlite", "postgres"] if backend == "both" else [backend]
    if "postgres" not in wanted:
        return wanted
    problem = pg_unreachable(pg_url)
    if problem is None:
        return wanted
    if backend == "postgres":
        print(f"error: PostgreSQL is not reachable at {pg_url}: {problem}", file=sys.stderr)
        return None
    print(f"notice: skipping PostgreSQL, not reachable at {pg_url}: {problem}")
    return ["sqlite"]


def pg_unreachable(url: str) -> str | None:
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as error:
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return None


def with_search_path(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


@contextmanager
def pg_schema(url: str, prefix: str) -> Iterator[str]:
    """A fresh schema for one run, yielded as a URL that selects it; dropped however the run ends."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(url, schema)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def bench_operation(now: datetime, ttl: timedelta) -> Operation:
    return new_operation(
        PRINCIPAL,
        method="tools/call",
        target="deploy",
        request_digest=request_digest("tools/call", {"name": "deploy", "arguments": {"env": "prod"}}),
        now=now,
        ttl=ttl,
    )


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
