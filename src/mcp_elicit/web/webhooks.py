"""The two built-in checks of an external system's webhooks: Standard Webhooks, and the `t=…,v1=…` HMAC header.

Guarantees: a delivery is accepted only when its signature, recomputed under the shared secret over its exact
body and its signed timestamp, matches one of those it carries (compared in constant time), and the
timestamp lies within `tolerance` seconds of this server's clock: a captured delivery cannot be replayed
after the window, and within it the event's id makes it a duplicate that changes nothing. A missing,
malformed (not ASCII, an overlong timestamp) or stale header fails closed, as a `SignatureInvalid` whose reason
names the header, never the secret or the body, and never as another exception.

Standard Webhooks is checked through `mcp_elicit.server.notifications.signing`, which signs our own notifications
too: the `standardwebhooks` library computes the HMAC, and that module adds what the library's `verify` lacks, a
`tolerance` on this server's injectable clock (the library's window is five minutes on its own), strict secret
checks, and headers checked first so that odd input is a `SignatureInvalid`.

Does not guarantee: that the provider's clock is right (a skew beyond `tolerance` refuses everything; the
reason says so), nor confidentiality of the body.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping

from mcp_elicit.server.notifications.signing import (
    DEFAULT_TOLERANCE,
    MAX_TIMESTAMP_DIGITS,
    SignatureInvalid,
    WebhookSecret,
    verify,
)

__all__ = ["DEFAULT_TOLERANCE", "SignatureInvalid", "StandardWebhooks", "TimestampedHmac", "sign_timestamped"]

MIN_HMAC_SECRET_BYTES = 16


class StandardWebhooks:
    """`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>` (standardwebhooks.com), checked by the
    same code that signs this server's own outgoing notifications (`mcp_elicit.server.notifications.signing`, the
    `standardwebhooks` library's HMAC under our window and clock)."""

    def __init__(
        self, secret: str | bytes, *, tolerance: int = DEFAULT_TOLERANCE, clock: Callable[[], float] = time.time
    ) -> None:
        self._secret = WebhookSecret(secret)
        self._tolerance = _positive(tolerance)
        self._clock = clock

    def __repr__(self) -> str:
        return f"StandardWebhooks(tolerance={self._tolerance})"

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        verify(self._secret, headers, body, tolerance=self._tolerance, now=self._clock())


class TimestampedHmac:
    """`<header>: t=<unix seconds>,v1=<hex HMAC-SHA256 of "{t}.{body}">[,v1=…]`, the scheme of the largest payment
    providers (Stripe names the header `Stripe-Signature`); several `v1` entries let a provider roll its secret."""

    def __init__(
        self,
        secret: str | bytes,
        *,
        header: str = "signature",
        tolerance: int = DEFAULT_TOLERANCE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        key = secret.encode() if isinstance(secret, str) else secret
        if len(key) < MIN_HMAC_SECRET_BYTES:
            raise ValueError(
                f"a webhook signing secret has at least {MIN_HMAC_SECRET_BYTES} bytes, this one {len(key)}"
            )
        self._key = key
        self._header = header.lower()
        self._tolerance = _positive(tolerance)
        self._clock = clock

    def __repr__(self) -> str:
        return f"TimestampedHmac(header={self._header!r}, tolerance={self._tolerance})"

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        given = headers.get(self._header)
        if not given:
            raise SignatureInvalid(f"the {self._header} header is missing")
        if not given.isascii():
            raise SignatureInvalid(f"the {self._header} header is not ASCII")
        stamps: list[str] = []
        signatures: list[str] = []
        for part in given.split(","):
            name, _, value = part.strip().partition("=")
            if name == "t":
                stamps.append(value)
            elif name == "v1":
                signatures.append(value)
        if len(stamps) != 1 or not (stamps[0].isdigit() and len(stamps[0]) <= MAX_TIMESTAMP_DIGITS):
            raise SignatureInvalid(f"the {self._header} header has no single t=<seconds since 1970>")
        if not signatures:
            raise SignatureInvalid(f"the {self._header} header has no v1 signature")
        stamp = int(stamps[0])
        if abs(self._clock() - stamp) > self._tolerance:
            raise SignatureInvalid(
                f"the {self._header} timestamp is more than {self._tolerance} s from now (a replay, or a clock off)"
            )
        expected = _hmac_hex(self._key, stamp, body).encode()
        if not any(hmac.compare_digest(expected, signature.encode()) for signature in signatures):
            raise SignatureInvalid(f"no v1 signature of the {self._header} header matches this body under this secret")


def sign_timestamped(secret: str | bytes, body: bytes, *, timestamp: int | None = None) -> str:
    """The `t=…,v1=…` header value a provider sends with `body` (for stand-in providers and tests)."""
    key = secret.encode() if isinstance(secret, str) else secret
    stamp = int(time.time()) if timestamp is None else timestamp
    return f"t={stamp},v1={_hmac_hex(key, stamp, body)}"


def _hmac_hex(key: bytes, stamp: int, body: bytes) -> str:
    return hmac.new(key, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()


def _positive(tolerance: int) -> int:
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance <= 0:
        raise ValueError(f"the tolerance is a positive whole number of seconds, got {tolerance!r}")
    return tolerance
