"""A standing grant recorded as the runtime records one: an operation, its accepted approval, the grant it gave."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from mcp_elicit.approvals import APPROVAL_KEY, GRANT_FIELD
from mcp_elicit.model import (
    DecisionOrigin,
    DecisionStatus,
    Grant,
    GrantKind,
    JSONObject,
    Principal,
    new_form_decision,
    new_grant,
    new_operation,
)
from mcp_elicit.store import Store

APPROVAL_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {GRANT_FIELD: {"type": "string", "enum": ["once", "session", "always"]}},
}


def recorded_grant(
    store: Store,
    principal: Principal,
    *,
    tool: str = "restart",
    kind: GrantKind = GrantKind.SESSION,
    scope: str | None = None,
    ttl: timedelta = timedelta(hours=1),
    now: datetime | None = None,
    grant_id: str | None = None,
) -> Grant:
    """`principal`'s grant for `tool`, given with an approval they accepted `now` (the wall clock's by default);
    with `grant_id`, under that id."""
    moment = now or datetime.now(UTC)
    lasting = timedelta(days=1) + abs(datetime.now(UTC) - moment)  # open on the store's clock, whatever `now` says
    digest = "sha256:" + uuid.uuid4().hex
    operation = store.create_operation(
        new_operation(principal, method="tools/call", target=tool, request_digest=digest, now=moment, ttl=lasting)
    )
    origin = DecisionOrigin(operation_id=operation.operation_id, key=APPROVAL_KEY, principal=principal,
                            origin_method="tools/call", origin_request_digest=digest)  # fmt: skip
    asked = new_form_decision(origin, message="Approve?", requested_schema=APPROVAL_SCHEMA, now=moment, ttl=lasting)
    decision = store.create_decision(asked)
    store.transition(decision, DecisionStatus.ACCEPTED, caller=principal, content={GRANT_FIELD: kind.value})
    grant = new_grant(
        principal, tool=tool, scope=scope, kind=kind, decision_id=decision.elicitation_id, approved_at=moment, ttl=ttl
    )
    return store.create_grant(grant if grant_id is None else replace(grant, grant_id=grant_id))
