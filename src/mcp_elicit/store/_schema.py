"""Versioned schema migrations, written once for both engines.

Migration N brings a database from version N-1 to N. A migration is never edited once released: a
change is a new entry. Type names differ between the engines and are filled in per dialect.
"""

from dataclasses import dataclass

WAITING_SQL = "('requested', 'accepted_url', 'external_pending')"


@dataclass(frozen=True, slots=True)
class Types:
    time: str
    json: str
    seq: str
    bytes: str


SQLITE_TYPES = Types(time="INTEGER", json="TEXT", seq="INTEGER PRIMARY KEY", bytes="BLOB")
POSTGRES_TYPES = Types(
    time="TIMESTAMPTZ", json="JSONB", seq="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", bytes="BYTEA"
)

_V1 = """
CREATE TABLE elicit_operations (
    operation_id TEXT PRIMARY KEY,
    principal_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    method TEXT NOT NULL,
    target TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    idempotency_key TEXT,
    status TEXT NOT NULL CHECK (status IN ('open', 'completed', 'failed', 'cancelled', 'expired')),
    result {json},
    version INTEGER NOT NULL,
    created_at {time} NOT NULL,
    updated_at {time} NOT NULL,
    expires_at {time} NOT NULL
);
CREATE INDEX elicit_operations_call ON elicit_operations (principal_id, client_id, method, target, request_digest);
CREATE INDEX elicit_operations_idempotency ON elicit_operations (principal_id, client_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX elicit_operations_due ON elicit_operations (expires_at) WHERE status = 'open';
CREATE TABLE elicit_decisions (
    elicitation_id TEXT PRIMARY KEY,
    operation_id TEXT NOT NULL REFERENCES elicit_operations (operation_id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    principal_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    origin_method TEXT NOT NULL,
    origin_request_digest TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('form', 'url')),
    status TEXT NOT NULL CHECK (status IN ('requested', 'accepted', 'declined', 'cancelled', 'expired',
        'accepted_url', 'external_pending', 'external_completed', 'external_failed')),
    resume_policy TEXT NOT NULL CHECK (resume_policy IN ('auto', 'manual', 'notification',
        'manual_or_notification')),
    message TEXT NOT NULL,
    requested_schema {json},
    url TEXT,
    sensitive_fields {json} NOT NULL,
    content {json},
    completion_version INTEGER NOT NULL,
    created_at {time} NOT NULL,
    updated_at {time} NOT NULL,
    expires_at {time} NOT NULL
);
CREATE INDEX elicit_decisions_principal_status ON elicit_decisions (principal_id, status);
CREATE INDEX elicit_decisions_operation ON elicit_decisions (operation_id, key);
CREATE INDEX elicit_decisions_due ON elicit_decisions (expires_at) WHERE status IN {waiting};
CREATE TABLE elicit_audit (
    seq {seq},
    subject_kind TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    from_status TEXT,
    to_status TEXT NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL,
    details {json} NOT NULL,
    at {time} NOT NULL
);
CREATE INDEX elicit_audit_subject ON elicit_audit (subject_id, seq);
CREATE TABLE elicit_journal (
    operation_id TEXT NOT NULL REFERENCES elicit_operations (operation_id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value {json},
    recorded_at {time} NOT NULL,
    PRIMARY KEY (operation_id, name)
);
CREATE TABLE elicit_tokens (
    token_id TEXT PRIMARY KEY,
    expires_at {time} NOT NULL
);
CREATE INDEX elicit_tokens_expiry ON elicit_tokens (expires_at)
"""

# The token vault: opaque sealed blobs, one per (principal, name). The store never sees plaintext or keys.
# NOT NULL is spelled out on the key columns: SQLite lets NULL into a non-INTEGER primary key otherwise.
_V2 = """
CREATE TABLE elicit_vault (
    principal_id TEXT NOT NULL,
    name TEXT NOT NULL,
    key_id TEXT NOT NULL,
    sealed {bytes} NOT NULL,
    created_at {time} NOT NULL,
    updated_at {time} NOT NULL,
    PRIMARY KEY (principal_id, name)
)
"""

# Dynamic client registrations of the local OAuth authorization server (`mcp_elicit.web.authserver`): the
# client's registered metadata as one JSON object, written once by registration and read by every instance.
_V3 = """
CREATE TABLE elicit_oauth_clients (
    client_id TEXT NOT NULL PRIMARY KEY,
    metadata {json} NOT NULL,
    created_at {time} NOT NULL
)
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
LATEST_VERSION = len(MIGRATIONS)


def statements(version: int, types: Types) -> list[str]:
    """The statements of migration `version` (1-based) for an engine's type names."""
    script = MIGRATIONS[version - 1].format(
        time=types.time, json=types.json, seq=types.seq, bytes=types.bytes, waiting=WAITING_SQL
    )
    return [statement.strip() for statement in script.split(";") if statement.strip()]
