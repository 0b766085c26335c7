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

# Single flight. At most one open operation per logical call, enforced by the database: one per
# (principal, client, method, target, request digest) for calls without an idempotency key, one per key of a
# caller for the others (schema 7 rebuilds what stores migrated by an earlier form of this step, which took a
# key across all callers, made). Open duplicates left by earlier
# versions (identical calls that raced) are expired first, the newest kept, each with its audit row. One
# question per key in an operation: later duplicates keep their rows under a key nobody asks for. Keys are
# bound to the request they first named, and claims let one call at a time run a step or put a question
# to the person.
_SAME_CALL = """(
    (o.idempotency_key IS NULL AND elicit_operations.idempotency_key IS NULL
     AND o.principal_id = elicit_operations.principal_id AND o.client_id = elicit_operations.client_id
     AND o.method = elicit_operations.method AND o.target = elicit_operations.target
     AND o.request_digest = elicit_operations.request_digest)
    OR (o.idempotency_key IS NOT NULL AND o.idempotency_key = elicit_operations.idempotency_key
        AND o.principal_id = elicit_operations.principal_id AND o.client_id = elicit_operations.client_id))"""
_SUPERSEDED = f"""elicit_operations.status = 'open' AND EXISTS (
    SELECT 1 FROM elicit_operations o WHERE o.status = 'open' AND o.operation_id <> elicit_operations.operation_id
    AND {_SAME_CALL}
    AND (o.created_at > elicit_operations.created_at
         OR (o.created_at = elicit_operations.created_at AND o.operation_id > elicit_operations.operation_id)))"""
# The runtime reads the newest question of a key; older duplicates are expired and set aside.
_NEWER_QUESTION = """EXISTS (
    SELECT 1 FROM elicit_decisions d WHERE d.operation_id = elicit_decisions.operation_id
    AND d.key = elicit_decisions.key AND (d.created_at > elicit_decisions.created_at
        OR (d.created_at = elicit_decisions.created_at AND d.elicitation_id > elicit_decisions.elicitation_id)))"""
# A key's binding comes from its open operation if it has one, else from its newest.
_OTHER_OPEN = "(CASE WHEN o.status = 'open' THEN 1 ELSE 0 END)"
_THIS_OPEN = "(CASE WHEN elicit_operations.status = 'open' THEN 1 ELSE 0 END)"
_V4 = f"""
INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)
    SELECT 'operation', operation_id, 'open', 'expired', 'system:migration',
        'superseded by a newer open operation of the same call or idempotency key', '{{{{}}}}', updated_at
    FROM elicit_operations WHERE {_SUPERSEDED};
UPDATE elicit_operations SET status = 'expired', version = version + 1 WHERE {_SUPERSEDED};
CREATE UNIQUE INDEX elicit_operations_open_call
    ON elicit_operations (principal_id, client_id, method, target, request_digest)
    WHERE status = 'open' AND idempotency_key IS NULL;
CREATE UNIQUE INDEX elicit_operations_open_key ON elicit_operations (principal_id, client_id, idempotency_key)
    WHERE status = 'open' AND idempotency_key IS NOT NULL;
CREATE TABLE elicit_idempotency_keys (
    idempotency_key TEXT NOT NULL,
    principal_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    method TEXT NOT NULL,
    target TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    created_at {{time}} NOT NULL,
    expires_at {{time}} NOT NULL,
    PRIMARY KEY (principal_id, client_id, idempotency_key)
);
CREATE INDEX elicit_idempotency_keys_expiry ON elicit_idempotency_keys (expires_at);
INSERT INTO elicit_idempotency_keys
    (idempotency_key, principal_id, client_id, method, target, request_digest, created_at, expires_at)
    SELECT idempotency_key, principal_id, client_id, method, target, request_digest, created_at, expires_at
    FROM elicit_operations WHERE idempotency_key IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM elicit_operations o WHERE o.idempotency_key = elicit_operations.idempotency_key
        AND o.principal_id = elicit_operations.principal_id AND o.client_id = elicit_operations.client_id
        AND o.operation_id <> elicit_operations.operation_id AND (
            {_OTHER_OPEN} > {_THIS_OPEN}
            OR ({_OTHER_OPEN} = {_THIS_OPEN}
                AND (o.created_at > elicit_operations.created_at
                     OR (o.created_at = elicit_operations.created_at
                         AND o.operation_id > elicit_operations.operation_id)))));
INSERT INTO elicit_audit (subject_kind, subject_id, from_status, to_status, actor, reason, details, at)
    SELECT 'decision', elicitation_id, status, 'expired', 'system:migration',
        'superseded by a newer question under the same key', '{{{{}}}}', updated_at
    FROM elicit_decisions WHERE status IN {{waiting}} AND {_NEWER_QUESTION};
UPDATE elicit_decisions SET status = 'expired', completion_version = completion_version + 1
    WHERE status IN {{waiting}} AND {_NEWER_QUESTION};
UPDATE elicit_decisions SET key = key || '#superseded-' || elicitation_id WHERE {_NEWER_QUESTION};
DROP INDEX elicit_decisions_operation;
CREATE UNIQUE INDEX elicit_decisions_operation_key ON elicit_decisions (operation_id, key);
CREATE TABLE elicit_claims (
    operation_id TEXT NOT NULL REFERENCES elicit_operations (operation_id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    holder TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    claimed_at {{time}} NOT NULL,
    lease_until {{time}} NOT NULL,
    PRIMARY KEY (operation_id, name)
)
"""

# Listing newest first (`decisions ls`, `Store.decision_page`): the listing's order as an index, so a page of
# the newest decisions, or of those past a cursor, reads its own rows instead of sorting the table.
_V5 = """
CREATE INDEX elicit_decisions_newest ON elicit_decisions (created_at DESC, elicitation_id)
"""

# The notification outbox. `elicit_subscriptions` names each configured webhook and the events it takes (no URL,
# no secret: those stay in the serving process's configuration); a transition writes one outbox row per
# subscription of its event, in its own transaction. A row keeps its delivery's state: attempts made, the time
# of the next one (pushed ahead while an attempt is under way, so a crashed deliverer's claim lapses), the
# last failure's reason, and when it settled (delivered, or given up as dead).
_V6 = """
CREATE TABLE elicit_subscriptions (
    name TEXT NOT NULL,
    event_type TEXT NOT NULL,
    PRIMARY KEY (name, event_type)
);
CREATE INDEX elicit_subscriptions_event ON elicit_subscriptions (event_type);
CREATE TABLE elicit_outbox (
    event_id TEXT NOT NULL,
    subscription TEXT NOT NULL,
    event_type TEXT NOT NULL,
    elicitation_id TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    principal_id TEXT NOT NULL,
    status TEXT NOT NULL,
    method TEXT NOT NULL,
    target TEXT NOT NULL,
    deadline {time} NOT NULL,
    occurred_at {time} NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts INTEGER NOT NULL,
    next_attempt_at {time} NOT NULL,
    last_error TEXT,
    settled_at {time},
    PRIMARY KEY (event_id, subscription)
);
CREATE INDEX elicit_outbox_due ON elicit_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX elicit_outbox_settled ON elicit_outbox (settled_at) WHERE state <> 'pending'
"""

# Idempotency keys per caller: a key is the caller's own (principal, client, key), so the same key from another
# caller names another call, neither refused nor revealed. The key table is rebuilt with that primary key
# (SQLite cannot change one in place), its rows carried over. The open operations' new unique index is built
# before the old one is dropped: on PostgreSQL the build's scan blocks writes to the table, not reads.
_V7 = """
CREATE TABLE elicit_idempotency_keys_per_caller (
    principal_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    method TEXT NOT NULL,
    target TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    created_at {time} NOT NULL,
    expires_at {time} NOT NULL,
    PRIMARY KEY (principal_id, client_id, idempotency_key)
);
INSERT INTO elicit_idempotency_keys_per_caller
    (principal_id, client_id, idempotency_key, method, target, request_digest, created_at, expires_at)
    SELECT principal_id, client_id, idempotency_key, method, target, request_digest, created_at, expires_at
    FROM elicit_idempotency_keys;
DROP TABLE elicit_idempotency_keys;
ALTER TABLE elicit_idempotency_keys_per_caller RENAME TO elicit_idempotency_keys;
CREATE INDEX elicit_idempotency_keys_expiry ON elicit_idempotency_keys (expires_at);
CREATE UNIQUE INDEX elicit_operations_open_caller_key
    ON elicit_operations (principal_id, client_id, idempotency_key)
    WHERE status = 'open' AND idempotency_key IS NOT NULL;
DROP INDEX elicit_operations_open_key
"""

# What a call is about, as the person asked is shown it: the tool and its arguments' redacted summary, rendered
# when the question is asked (`mcp_elicit.model.summarize_call`). Never the arguments themselves; questions asked
# before this version have none.
_V8 = """
ALTER TABLE elicit_decisions ADD COLUMN about TEXT NOT NULL DEFAULT ''
"""

# Standing grants: a person's approval of one tool's later calls from one app (principal and client), for a while,
# optionally narrowed to one scope value of the gate's. One grant per approving decision at most. A revoked grant
# keeps its row (when, by whom), so the audit rows of the calls it let through still name it. A call looks up
# the grant covering it among the unrevoked rows of its principal, client and tool: the partial index's range.
_V9 = """
CREATE TABLE elicit_grants (
    grant_id TEXT NOT NULL PRIMARY KEY,
    principal_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    scope TEXT,
    kind TEXT NOT NULL CHECK (kind IN ('session', 'always')),
    decision_id TEXT NOT NULL UNIQUE,
    created_at {time} NOT NULL,
    expires_at {time} NOT NULL,
    revoked_at {time},
    revoked_by TEXT
);
CREATE INDEX elicit_grants_covering ON elicit_grants (principal_id, client_id, tool, expires_at)
    WHERE revoked_at IS NULL;
CREATE INDEX elicit_grants_newest ON elicit_grants (created_at DESC, grant_id)
"""

# Approvers: a decision that names who answers it keeps its rule (`ApproverRule.dumped()`; NULL for the others),
# and each approver's vote on one proposal (the digest of what they approved or rejected) is one row, so a vote
# cast twice is refused by the primary key and a quorum counts distinct approvers. Votes go with their decision.
# An approver's queue reads the waiting decisions with approvers, newest first: the partial index's range.
_V10 = """
ALTER TABLE elicit_decisions ADD COLUMN approvers {json};
CREATE INDEX elicit_decisions_approvals ON elicit_decisions (created_at DESC, elicitation_id)
    WHERE approvers IS NOT NULL AND status = 'requested';
CREATE TABLE elicit_votes (
    elicitation_id TEXT NOT NULL REFERENCES elicit_decisions (elicitation_id) ON DELETE CASCADE,
    approver_id TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('approve', 'reject')),
    proposal TEXT NOT NULL,
    content {json} NOT NULL,
    roles {json} NOT NULL,
    cast_at {time} NOT NULL,
    PRIMARY KEY (elicitation_id, approver_id, verdict, proposal)
)
"""

# Tamper evidence: the sealer (`_audit_chain`) appends each audit row to its subject's hash chain after the row
# commits (NULL: not sealed yet; writers never wait on a chain), keeps each chain's head, and signs a checkpoint
# over the heads it changed (linked to the previous checkpoint's root), keeping those heads, which a seal reads
# by chain to check the heads it extends. The rows written before this schema are chained by the first seal after
# it: `elicit_audit_origin` records the highest of them, and every checkpoint signs it.
_V11 = """
ALTER TABLE elicit_audit ADD COLUMN chain_seq BIGINT;
ALTER TABLE elicit_audit ADD COLUMN prev_hash TEXT;
ALTER TABLE elicit_audit ADD COLUMN row_hash TEXT;
CREATE INDEX elicit_audit_unsealed ON elicit_audit (seq) WHERE row_hash IS NULL;
CREATE UNIQUE INDEX elicit_audit_chain ON elicit_audit (subject_id, chain_seq) WHERE chain_seq IS NOT NULL;
CREATE TABLE elicit_audit_heads (
    chain TEXT NOT NULL PRIMARY KEY,
    chain_seq BIGINT NOT NULL,
    row_hash TEXT NOT NULL
);
CREATE TABLE elicit_audit_checkpoints (
    checkpoint_id BIGINT NOT NULL PRIMARY KEY,
    sealed_at {time} NOT NULL,
    prev_root TEXT NOT NULL,
    root TEXT NOT NULL,
    chains BIGINT NOT NULL,
    rows_sealed BIGINT NOT NULL,
    migrated_through BIGINT NOT NULL,
    sealer_running BOOLEAN NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL
);
CREATE TABLE elicit_audit_checkpoint_heads (
    checkpoint_id BIGINT NOT NULL,
    chain TEXT NOT NULL,
    chain_seq BIGINT NOT NULL,
    row_hash TEXT NOT NULL,
    PRIMARY KEY (checkpoint_id, chain)
);
CREATE INDEX elicit_audit_checkpoint_chain ON elicit_audit_checkpoint_heads (chain, checkpoint_id);
CREATE TABLE elicit_audit_origin (
    migrated_through BIGINT NOT NULL
);
INSERT INTO elicit_audit_origin (migrated_through) SELECT coalesce(max(seq), 0) FROM elicit_audit
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11)
LATEST_VERSION = len(MIGRATIONS)


def statements(version: int, types: Types) -> list[str]:
    """The statements of migration `version` (1-based) for an engine's type names."""
    script = MIGRATIONS[version - 1].format(
        time=types.time, json=types.json, seq=types.seq, bytes=types.bytes, waiting=WAITING_SQL
    )
    return [statement.strip() for statement in script.split(";") if statement.strip()]
