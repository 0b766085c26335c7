"""The tool-author API: one tool body, every protocol era, durable decisions."""

from mcp_elicit.model import ResumePolicy
from mcp_elicit.server.answers import (
    Accepted,
    Answer,
    Cancelled,
    Completed,
    Consented,
    Declined,
    Expired,
    Failed,
    UrlAnswer,
)
from mcp_elicit.server.audit_sealer import AuditSealing
from mcp_elicit.server.config import RequestState, Timing
from mcp_elicit.server.execution import DEFAULT_LEASE, ClientRefused, OutcomeUnknown
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.flow import DEFAULT_FORM_TTL, DEFAULT_URL_TTL, Flow
from mcp_elicit.server.forms import Email, FormSpec, InvalidAnswer, SecretField, Titled, UnsupportedField, form_spec
from mcp_elicit.server.identity import IdentityPolicy
from mcp_elicit.server.notifications import DecisionLinks, Mail, Notifications, Retry, Webhook
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY, REPLAYED_META_KEY, Elicitation
from mcp_elicit.server.signals import SwallowedSignal
from mcp_elicit.server.tasks import TaskPolicy, TaskSettings
from mcp_elicit.store import IdempotencyKeyConflict

__all__ = [
    "ANSWERS_ARGUMENT",
    "DEFAULT_FORM_TTL",
    "DEFAULT_LEASE",
    "DEFAULT_URL_TTL",
    "IDEMPOTENCY_META_KEY",
    "REPLAYED_META_KEY",
    "Accepted",
    "Answer",
    "AuditSealing",
    "Cancelled",
    "ClientRefused",
    "Completed",
    "Consented",
    "DecisionLinks",
    "Declined",
    "Elicitation",
    "Email",
    "Expired",
    "Failed",
    "Fallback",
    "Flow",
    "FormSpec",
    "IdempotencyKeyConflict",
    "IdentityPolicy",
    "InvalidAnswer",
    "Mail",
    "Notifications",
    "OutcomeUnknown",
    "RequestState",
    "ResumePolicy",
    "Retry",
    "SecretField",
    "SwallowedSignal",
    "TaskPolicy",
    "TaskSettings",
    "Timing",
    "Titled",
    "UnsupportedField",
    "UrlAnswer",
    "Webhook",
    "form_spec",
]
