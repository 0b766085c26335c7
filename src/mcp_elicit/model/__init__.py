"""The pure domain: records, statuses and the transition tables. No I/O, no SDK."""

from mcp_elicit.model.approvers import (
    GRANT_FIELD,
    NOTE_FIELD,
    REJECT_FIELD,
    Approver,
    ApproverRule,
    Tally,
    Verdict,
    Vote,
    joined_notes,
    proposal_digest,
)
from mcp_elicit.model.audit import AuditEntry, SubjectKind
from mcp_elicit.model.decision import (
    Decision,
    DecisionOrigin,
    new_elicitation_id,
    new_form_decision,
    new_url_decision,
)
from mcp_elicit.model.digest import UnencodableValue, canonical_json, check_encodable, request_digest
from mcp_elicit.model.grant import Grant, GrantKind, GrantStatus, new_grant
from mcp_elicit.model.identity import Actor, BrowserUser, Caller, Operator, Principal, System
from mcp_elicit.model.json import JSONObject, JSONValue
from mcp_elicit.model.operation import Operation, new_operation
from mcp_elicit.model.redaction import (
    REDACTED,
    looks_like_credential,
    looks_secret,
    redact_content,
    redact_text,
    redact_url,
)
from mcp_elicit.model.status import DecisionStatus, Mode, OperationStatus, ResumePolicy
from mcp_elicit.model.summary import render_arguments, summarize_call
from mcp_elicit.model.transitions import (
    DECISION_TRANSITIONS,
    FORM_TRANSITIONS,
    OPERATION_TRANSITIONS,
    TERMINAL_DECISION_STATUSES,
    URL_TRANSITIONS,
    WAITING_DECISION_STATUSES,
    IllegalTransition,
    check_decision_transition,
    check_operation_transition,
    is_legal,
)

__all__ = [
    "DECISION_TRANSITIONS",
    "FORM_TRANSITIONS",
    "GRANT_FIELD",
    "NOTE_FIELD",
    "OPERATION_TRANSITIONS",
    "REDACTED",
    "REJECT_FIELD",
    "TERMINAL_DECISION_STATUSES",
    "URL_TRANSITIONS",
    "WAITING_DECISION_STATUSES",
    "Actor",
    "Approver",
    "ApproverRule",
    "AuditEntry",
    "BrowserUser",
    "Caller",
    "Decision",
    "DecisionOrigin",
    "DecisionStatus",
    "Grant",
    "GrantKind",
    "GrantStatus",
    "IllegalTransition",
    "JSONObject",
    "JSONValue",
    "Mode",
    "Operation",
    "OperationStatus",
    "Operator",
    "Principal",
    "ResumePolicy",
    "SubjectKind",
    "System",
    "Tally",
    "UnencodableValue",
    "Verdict",
    "Vote",
    "canonical_json",
    "check_decision_transition",
    "check_encodable",
    "check_operation_transition",
    "is_legal",
    "joined_notes",
    "looks_like_credential",
    "looks_secret",
    "new_elicitation_id",
    "new_form_decision",
    "new_grant",
    "new_operation",
    "new_url_decision",
    "proposal_digest",
    "redact_content",
    "redact_text",
    "redact_url",
    "render_arguments",
    "request_digest",
    "summarize_call",
]
