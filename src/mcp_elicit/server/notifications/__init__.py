"""Notifications: "decision waiting", "decision ended" and "task needs input" events, sent to webhooks.

See `delivery` for what is guaranteed, `signing` for how a receiver checks a delivery.
"""

from mcp_elicit.server.notifications.config import Notifications, Retry, Webhook
from mcp_elicit.server.notifications.delivery import Deliverer, payload
from mcp_elicit.server.notifications.signing import SignatureInvalid, WebhookSecret, sign, verify
from mcp_elicit.store.protocol import NotificationEvent

__all__ = [
    "Deliverer",
    "NotificationEvent",
    "Notifications",
    "Retry",
    "SignatureInvalid",
    "Webhook",
    "WebhookSecret",
    "payload",
    "sign",
    "verify",
]
