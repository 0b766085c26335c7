"""The operation record: the originating call that one or more decisions belong to."""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from mcp_elicit.model.identity import Principal
from mcp_elicit.model.json import JSONValue
from mcp_elicit.model.status import OperationStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One tool call (or prompt/resource read) that may pause for decisions and be re-executed.

    `request_digest` identifies the call's canonical parameters so that a retry can find the operation
    without the store ever holding the parameters themselves. `result` is the recorded outcome a
    completed operation hands back to an identical call.
    """

    operation_id: str
    principal_id: str
    client_id: str
    method: str
    target: str
    request_digest: str
    idempotency_key: str | None
    status: OperationStatus
    result: JSONValue
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime

    @property
    def principal(self) -> Principal:
        return Principal(self.principal_id, self.client_id)


def new_operation(
    principal: Principal,
    *,
    method: str,
    target: str,
    request_digest: str,
    now: datetime,
    ttl: timedelta,
    idempotency_key: str | None = None,
) -> Operation:
    if ttl <= timedelta(0):
        raise ValueError(f"an operation needs a positive TTL, got {ttl}")
    if now.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return Operation(
        operation_id=str(uuid.uuid4()),
        principal_id=principal.principal_id,
        client_id=principal.client_id,
        method=method,
        target=target,
        request_digest=request_digest,
        idempotency_key=idempotency_key,
        status=OperationStatus.OPEN,
        result=None,
        version=0,
        created_at=now,
        updated_at=now,
        expires_at=now + ttl,
    )
