"""The decision record: one question put to one principal, and what became of it."""

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mcp_elicit.model.approvers import ApproverRule
from mcp_elicit.model.identity import Principal
from mcp_elicit.model.json import JSONObject
from mcp_elicit.model.status import DecisionStatus, Mode, ResumePolicy
from mcp_elicit.model.transitions import TERMINAL_DECISION_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """A durable decision point.

    It names the operation it belongs to and that operation's method and request digest, never the
    request's content (`about` is its redacted summary, as the person is shown it). `completion_version`
    grows by one with every transition, so a snapshot's `(status, completion_version)` pair is exactly what
    a compare-and-set expects to find.
    """

    elicitation_id: str
    operation_id: str
    key: str
    principal_id: str
    client_id: str
    origin_method: str
    origin_request_digest: str
    mode: Mode
    status: DecisionStatus
    resume_policy: ResumePolicy
    message: str
    requested_schema: JSONObject | None
    url: str | None
    sensitive_fields: tuple[str, ...]
    content: JSONObject | None
    completion_version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    about: str = ""
    """What the call is about as the person is shown it (`summarize_call`), rendered when the question was asked;
    empty when the question was asked before decisions kept it."""
    approvers: ApproverRule | None = None
    """Who answers, when not the requester: signed-in approvers, who vote (`model.approvers`)."""

    @property
    def principal(self) -> Principal:
        return Principal(self.principal_id, self.client_id)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_DECISION_STATUSES

    def is_overdue(self, now: datetime) -> bool:
        return not self.is_terminal and now >= self.expires_at


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionOrigin:
    """Where a decision comes from: the operation, its call and the key of the question within it."""

    operation_id: str
    key: str
    principal: Principal
    origin_method: str
    origin_request_digest: str
    resume_policy: ResumePolicy = ResumePolicy.AUTO
    sensitive_fields: tuple[str, ...] = field(default=())
    about: str = ""
    """The call's summary the person is shown (`summarize_call`); never its arguments themselves."""
    approvers: ApproverRule | None = None


def new_form_decision(
    origin: DecisionOrigin,
    *,
    message: str,
    requested_schema: JSONObject,
    now: datetime,
    ttl: timedelta,
) -> Decision:
    if requested_schema.get("type") != "object":
        raise ValueError("a form decision needs a requested_schema of type 'object'")
    return _new(origin, Mode.FORM, message=message, schema=dict(requested_schema), url=None, now=now, ttl=ttl)


def new_elicitation_id() -> str:
    return str(uuid.uuid4())


def new_url_decision(
    origin: DecisionOrigin,
    *,
    message: str,
    url: str,
    now: datetime,
    ttl: timedelta,
    elicitation_id: str | None = None,
) -> Decision:
    """A URL decision; pass `elicitation_id` when the URL itself names the decision (a page per decision)."""
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"a URL decision needs an http(s) URL, got {url[:40]!r}")
    return _new(
        origin, Mode.URL, message=message, schema=None, url=url, now=now, ttl=ttl, elicitation_id=elicitation_id
    )


def _new(
    origin: DecisionOrigin,
    mode: Mode,
    *,
    message: str,
    schema: JSONObject | None,
    url: str | None,
    now: datetime,
    ttl: timedelta,
    elicitation_id: str | None = None,
) -> Decision:
    if ttl <= timedelta(0):
        raise ValueError(f"a decision needs a positive TTL, got {ttl}")
    if now.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    if not message:
        raise ValueError("a decision needs a message for the person asked")
    return Decision(
        elicitation_id=elicitation_id or new_elicitation_id(),
        operation_id=origin.operation_id,
        key=origin.key,
        principal_id=origin.principal.principal_id,
        client_id=origin.principal.client_id,
        origin_method=origin.origin_method,
        origin_request_digest=origin.origin_request_digest,
        mode=mode,
        status=DecisionStatus.REQUESTED,
        resume_policy=origin.resume_policy,
        message=message,
        requested_schema=schema,
        url=url,
        sensitive_fields=tuple(origin.sensitive_fields),
        content=None,
        completion_version=0,
        created_at=now,
        updated_at=now,
        expires_at=now + ttl,
        about=origin.about,
        approvers=origin.approvers,
    )
