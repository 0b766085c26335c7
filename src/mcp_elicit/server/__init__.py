"""The tool-author API: one tool body, every protocol era, durable decisions."""

from mcp_elicit.server.answers import (
    Accepted,
    Answer,
    Cancelled,
    Completed,
    Declined,
    Expired,
    Failed,
    UrlAnswer,
)
from mcp_elicit.server.fallback import ANSWERS_ARGUMENT, Fallback
from mcp_elicit.server.flow import DEFAULT_FORM_TTL, DEFAULT_URL_TTL, ClientRefused, Flow
from mcp_elicit.server.forms import Email, FormSpec, InvalidAnswer, SecretField, Titled, UnsupportedField, form_spec
from mcp_elicit.server.identity import IdentityPolicy
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY, Elicitation

__all__ = [
    "ANSWERS_ARGUMENT",
    "DEFAULT_FORM_TTL",
    "DEFAULT_URL_TTL",
    "IDEMPOTENCY_META_KEY",
    "Accepted",
    "Answer",
    "Cancelled",
    "ClientRefused",
    "Completed",
    "Declined",
    "Elicitation",
    "Email",
    "Expired",
    "Failed",
    "Fallback",
    "Flow",
    "FormSpec",
    "IdentityPolicy",
    "InvalidAnswer",
    "SecretField",
    "Titled",
    "UnsupportedField",
    "UrlAnswer",
    "form_spec",
]
