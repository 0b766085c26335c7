"""Notifications: "decision waiting", "decision ended" and "task needs input" events, sent to webhooks and by mail.

See `delivery` for what is guaranteed, `signing` for how a receiver checks a delivery, `slack` and `mail` for the
messages made for people, and `links` for the signed link to the decision's page they carry.
"""

from mcp_elicit.server.notifications.config import Notifications, Retry, Webhook
from mcp_elicit.server.notifications.delivery import Deliverer, payload
from mcp_elicit.server.notifications.links import DecisionLinks, LinkCheck
from mcp_elicit.server.notifications.mail import Mail
from mcp_elicit.server.notifications.signing import SignatureInvalid, WebhookSecret, sign, verify
from mcp_elicit.server.notifications.slack import slack_payload
from mcp_elicit.store.protocol import NotificationEvent

__all__ = [
    "DecisionLinks",
    "Deliverer",
    "LinkCheck",
    "Mail",
    "NotificationEvent",
    "Notifications",
    "Retry",
    "SignatureInvalid",
    "Webhook",
    "WebhookSecret",
    "payload",
    "sign",
    "slack_payload",
    "verify",
]
