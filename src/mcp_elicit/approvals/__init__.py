"""Approvals: gates that let a tool's call run only once a person approved that exact call, or a standing grant
of theirs covers it; or once its approvers, a policy or another agent approved it out of band (`backends`).

Built on decisions (an approval is a decision of the call's operation); used by the server's runtime.
"""

from mcp_elicit.approvals.backends import (
    AgentApproval,
    ApprovalBackend,
    ApprovalRequest,
    InboxApproval,
    PolicyApproval,
    Ruling,
)
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
    editable_arguments,
)
from mcp_elicit.approvals.limits import ApprovalLimited, ApprovalLimits
from mcp_elicit.model import ApproverRule

__all__ = [
    "APPROVAL_KEY",
    "DEFAULT_APPROVAL_TTL",
    "DEFAULT_SESSION_TTL",
    "GRANT_FIELD",
    "NOTE_FIELD",
    "REJECT_FIELD",
    "AgentApproval",
    "ApprovalBackend",
    "ApprovalLimited",
    "ApprovalLimits",
    "ApprovalRequest",
    "Approved",
    "ApproverRule",
    "Edit",
    "Gate",
    "GateRefused",
    "GatedTool",
    "GrantOffer",
    "Grants",
    "InboxApproval",
    "PolicyApproval",
    "Rejected",
    "Ruling",
    "editable_arguments",
]
