"""A standing grant: a person's approval of one tool's later calls from one app, for a while.

A grant is bound to the principal and client that were approved, and to one tool, and, when its gate scopes
grants, to one scope value: it never covers another principal's call, another client's, another tool's, or a
call of another scope. It covers nothing once it expired or was revoked; revocation is kept (when, by whom),
never deleted, so the audit of the calls it let through still names it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from mcp_elicit.model.identity import Principal


class GrantKind(StrEnum):
    SESSION = "session"
    """This app (the client) may call the tool without asking for the gate's session TTL."""
    ALWAYS = "always"
    """This app may call the tool without asking until the gate's longest TTL."""


class GrantStatus(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """One grant as stored. `decision_id` is the approval that created it (one grant per approval at most)."""

    grant_id: str
    principal_id: str
    client_id: str
    tool: str
    scope: str | None
    """The gate's scope value of the approved call; `None` for a gate that does not scope its grants."""
    kind: GrantKind
    decision_id: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    @property
    def principal(self) -> Principal:
        return Principal(self.principal_id, self.client_id)

    def status(self, now: datetime) -> GrantStatus:
        if self.revoked_at is not None:
            return GrantStatus.REVOKED
        if now >= self.expires_at:
            return GrantStatus.EXPIRED
        return GrantStatus.ACTIVE

    def covers(self, principal: Principal, tool: str, scope: str | None, now: datetime) -> bool:
        """Whether a call of `tool` by `principal` with this scope value may run without asking, at `now`."""
        return (
            self.status(now) is GrantStatus.ACTIVE
            and (self.principal_id, self.client_id) == (principal.principal_id, principal.client_id)
            and self.tool == tool
            and self.scope == scope
        )


def new_grant(
    principal: Principal,
    *,
    tool: str,
    scope: str | None,
    kind: GrantKind,
    decision_id: str,
    approved_at: datetime,
    ttl: timedelta,
) -> Grant:
    """The grant an approval creates, running `ttl` from the moment it was approved."""
    if ttl <= timedelta(0):
        raise ValueError(f"a grant needs a positive TTL, got {ttl}")
    if approved_at.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    if not tool:
        raise ValueError("a grant names the tool it covers")
    return Grant(
        grant_id=str(uuid.uuid4()),
        principal_id=principal.principal_id,
        client_id=principal.client_id,
        tool=tool,
        scope=scope,
        kind=GrantKind(kind),
        decision_id=decision_id,
        created_at=approved_at,
        expires_at=approved_at + ttl,
    )
