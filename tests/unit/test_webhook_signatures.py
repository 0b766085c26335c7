"""The two built-in webhook verifiers: what they accept, and every way a delivery fails closed."""

from __future__ import annotations

import pytest

from mcp_elicit.server.notifications.signing import WebhookSecret, sign, verify
from mcp_elicit.web.webhooks import SignatureInvalid, StandardWebhooks, TimestampedHmac, sign_timestamped

SECRET = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
HMAC_SECRET = "hmac-secret-0123456789"
NOW = 1_800_000_000
BODY = b'{"id":"evt_1","type":"payment.succeeded"}'


def test_standard_webhooks_accepts_what_our_own_signer_sends_and_nothing_else() -> None:
    verifier = StandardWebhooks(SECRET, clock=lambda: NOW)
    headers = sign(WebhookSecret(SECRET), "evt_1", BODY, timestamp=NOW)
    verifier.verify(headers, BODY)
    with pytest.raises(SignatureInvalid, match="matches"):
        verifier.verify(headers, BODY + b" ")
    with pytest.raises(SignatureInvalid, match="from now"):
        verifier.verify(sign(WebhookSecret(SECRET), "evt_1", BODY, timestamp=NOW - 301), BODY)
    with pytest.raises(SignatureInvalid, match="required"):
        verifier.verify({}, BODY)


def test_timestamped_hmac_accepts_its_signature_and_a_rolled_secret() -> None:
    verifier = TimestampedHmac(HMAC_SECRET, header="Example-Signature", clock=lambda: NOW)
    header = sign_timestamped(HMAC_SECRET, BODY, timestamp=NOW)
    verifier.verify({"example-signature": header}, BODY)
    old = sign_timestamped("the-previous-secret-0123", BODY, timestamp=NOW).split(",")[1]
    verifier.verify({"example-signature": f"{header},{old}"}, BODY)


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (None, "missing"),
        ("v1=00", "no single t="),
        (f"t={NOW},t={NOW},v1=00", "no single t="),
        ("t=soon,v1=00", "no single t="),
        (f"t={NOW}", "no v1"),
        (sign_timestamped(HMAC_SECRET, BODY, timestamp=NOW - 301), "from now"),
        (sign_timestamped("another-secret-0123456", BODY, timestamp=NOW), "matches"),
        (sign_timestamped(HMAC_SECRET, BODY + b"x", timestamp=NOW), "matches"),
        (f"t={NOW},v1=\u00e9\u00e9", "not ASCII"),
        ("t=" + "9" * 5000 + ",v1=00", "no single t="),
        (f"t={NOW}{'0' * 20},v1=00", "no single t="),
    ],
)
def test_timestamped_hmac_fails_closed(header: str | None, why: str) -> None:
    verifier = TimestampedHmac(HMAC_SECRET, header="Example-Signature", clock=lambda: NOW)
    headers = {} if header is None else {"example-signature": header}
    with pytest.raises(SignatureInvalid, match=why) as refused:
        verifier.verify(headers, BODY)
    assert HMAC_SECRET not in str(refused.value)


def test_a_short_secret_or_no_tolerance_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        TimestampedHmac("short")
    with pytest.raises(ValueError, match="positive"):
        TimestampedHmac(HMAC_SECRET, tolerance=0)


SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_standard_webhooks_reproduces_and_accepts_the_specifications_published_test_vector() -> None:
    assert WebhookSecret(SPEC_SECRET).signature(SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE
    headers = {"webhook-id": SPEC_ID, "webhook-timestamp": str(SPEC_TIMESTAMP), "webhook-signature": SPEC_SIGNATURE}
    assert verify(WebhookSecret(SPEC_SECRET), headers, SPEC_BODY, now=SPEC_TIMESTAMP) == SPEC_ID
    StandardWebhooks(SPEC_SECRET, clock=lambda: SPEC_TIMESTAMP).verify(headers, SPEC_BODY)
    with pytest.raises(SignatureInvalid, match="matches"):
        StandardWebhooks(SPEC_SECRET, clock=lambda: SPEC_TIMESTAMP).verify(headers, SPEC_BODY.replace(b"2", b"3"))


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        ({"webhook-signature": "v1,\u00e9t\u00e9"}, "not ASCII"),
        ({"webhook-id": "msg_\u00e9"}, "not ASCII"),
        ({"webhook-timestamp": "9" * 5000}, "whole seconds"),
        ({"webhook-timestamp": str(NOW) + "0" * 20}, "whole seconds"),
    ],
)
def test_standard_webhooks_fails_closed_on_malformed_headers(changed: dict[str, str], why: str) -> None:
    headers = sign(WebhookSecret(SECRET), "evt_1", BODY, timestamp=NOW) | changed
    with pytest.raises(SignatureInvalid, match=why):
        StandardWebhooks(SECRET, clock=lambda: NOW).verify(headers, BODY)
