"""Approvals: gates that let a tool's call run only once a person approved that exact call, or a standing grant
of theirs covers it.

Built on decisions (an approval is a decision of the call's operation); used by the server's runtime.
"""

from mcp_elicit.approvals.gate import (
    APPROVAL_KEY,
    DEFAULT_APPROVAL_TTL,
    DEFAULT_SESSION_TTL,
    GRANT_FIELD,
    NOTE_FIELD,
    REJECT_FIELD,
    Approved,
    Edit,
    Gate,
    GatedTool,
    GateRefused,
    GrantOffer,
    Grants,
    Rejected,
)
from mcp_elicit.model import ApproverRule

__all__ = [
    "APPROVAL_KEY",
    "DEFAULT_APPROVAL_TTL",
    "DEFAULT_SESSION_TTL",
    "GRANT_FIELD",
    "NOTE_FIELD",
    "REJECT_FIELD",
    "Approved",
    "ApproverRule",
    "Edit",
    "Gate",
    "GateRefused",
    "GatedTool",
    "GrantOffer",
    "Grants",
    "Rejected",
]
