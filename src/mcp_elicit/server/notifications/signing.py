"""Webhook signatures as the Standard Webhooks specification has them, for senders and receivers alike.

Guarantees: a delivery carries `webhook-id` (the event's id, the same on every retry), `webhook-timestamp`
(seconds since 1970 at the attempt) and `webhook-signature: v1,<base64 HMAC-SHA256>` over
`"{id}.{timestamp}.{body}"` under the subscription's secret. `verify` accepts a body only when one of the
listed signatures matches, compared in constant time, and the timestamp lies within `tolerance` of now, so a
captured delivery cannot be replayed later (within the window, the id lets the receiver drop it). It fails
closed: a missing header, a malformed one (not ASCII, a timestamp of more than `MAX_TIMESTAMP_DIGITS` digits or
past the year 9999) or a stale timestamp is a `SignatureInvalid`, never another exception.

The HMAC is the `standardwebhooks` library's (`Webhook.sign`, the specification's own), for our notifications and
for receivers of Standard Webhooks (`mcp_elicit.web.webhooks.StandardWebhooks`) alike. This module wraps it for
what the library does otherwise: its `verify` has a fixed five-minute window on its own clock, where ours is
`tolerance` on an injectable `now`; it pads a secret, skips stray characters and takes a two-byte key, where ours
is `whsec_` and strict base64 of at least `MIN_SECRET_BYTES` bytes; and input reaches it only once the headers
are checked, so odd input is a `SignatureInvalid` with its reason, never another of the library's exceptions (a
surrogate in the id is a `UnicodeEncodeError` there).

Does not guarantee: secrecy (the body travels as TLS leaves it), nor anything about order or uniqueness of
deliveries: they come at least once, and a receiver deduplicates by `webhook-id`.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"  # noqa: S105 (the format's prefix, not a secret)
MIN_SECRET_BYTES = 24
MAX_TIMESTAMP_DIGITS = 12
"""Seconds since 1970 fit in 11 digits until the year 5138: a longer timestamp is malformed, not parsed."""
DEFAULT_TOLERANCE = 300
"""Seconds a timestamp may lie from the receiver's clock, either way (the specification's suggestion)."""
ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER = "webhook-id", "webhook-timestamp", "webhook-signature"


class SignatureInvalid(ValueError):
    """A delivery whose signature does not hold: the reason is for the receiver's log, not for the sender."""


class WebhookSecret:
    """A subscription's signing key: `whsec_<base64>` as the specification writes it, or the raw bytes."""

    __slots__ = ("_webhook",)

    def __init__(self, secret: str | bytes) -> None:
        key = secret if isinstance(secret, bytes) else _decoded(secret)
        if len(key) < MIN_SECRET_BYTES:
            raise ValueError(
                f"a webhook secret has at least {MIN_SECRET_BYTES} bytes, this one {len(key)}; generate one with: "
                "python -c \"import base64, secrets; print('whsec_' + base64.b64encode(secrets.token_bytes(32))"
                '.decode())"'
            )
        self._webhook = Webhook(key)

    def __repr__(self) -> str:
        return "WebhookSecret(...)"

    def signature(self, event_id: str, timestamp: int, body: bytes) -> str:
        """`v1,<base64>`; the library takes the moment as a date, so a timestamp past the year 9999 is a ValueError."""
        try:
            moment = datetime.fromtimestamp(timestamp, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"timestamp {timestamp} is not a date between the years 1 and 9999") from None
        return self._webhook.sign(event_id, moment, body)


def _decoded(text: str) -> bytes:
    if not text.startswith(SECRET_PREFIX):
        raise ValueError(f"a webhook secret is written {SECRET_PREFIX}<base64> (or given as bytes)")
    try:
        return base64.b64decode(text[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the webhook secret after {SECRET_PREFIX} is not base64") from None


def sign(secret: WebhookSecret, event_id: str, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """The three headers of one delivery attempt."""
    stamp = int(time.time()) if timestamp is None else timestamp
    return {
        ID_HEADER: event_id,
        TIMESTAMP_HEADER: str(stamp),
        SIGNATURE_HEADER: secret.signature(event_id, stamp, body),
    }


def verify(
    secret: WebhookSecret,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> str:
    """The event id of a delivery whose signature holds (`headers` looked up by lower-case name); else raises."""
    event_id, stamp, signatures = (headers.get(name) for name in (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER))
    if not event_id or not stamp or not signatures:
        raise SignatureInvalid("a webhook-id, webhook-timestamp and webhook-signature header are all required")
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= MAX_TIMESTAMP_DIGITS):
        raise SignatureInvalid("webhook-timestamp is not whole seconds since 1970")
    if not (event_id.isascii() and signatures.isascii()):
        raise SignatureInvalid("webhook-id or webhook-signature is not ASCII")
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        raise SignatureInvalid(f"webhook-timestamp is more than {tolerance} s from now (a replay, or a clock off)")
    try:
        expected = secret.signature(event_id, int(stamp), body).encode()
    except ValueError:
        raise SignatureInvalid("webhook-timestamp is past the year 9999") from None
    if not any(
        hmac.compare_digest(expected, given.encode()) for given in signatures.split(" ") if given.startswith("v1,")
    ):
        raise SignatureInvalid("no v1 signature of webhook-signature matches this body under this secret")
    return event_id
