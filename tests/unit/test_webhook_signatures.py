"""The two built-in webhook verifiers: what they accept, every way a delivery fails closed, and that the
`standardwebhooks` library and our signatures accept each other."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

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
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="positive whole number"):
            TimestampedHmac(HMAC_SECRET, tolerance=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="positive whole number"):
            StandardWebhooks(SECRET, tolerance=bad)  # type: ignore[arg-type]


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
        ({"webhook-id": "msg_\ud800"}, "not ASCII"),
        ({"webhook-timestamp": "9" * 5000}, "whole seconds"),
        ({"webhook-timestamp": str(NOW) + "0" * 20}, "whole seconds"),
    ],
)
def test_standard_webhooks_fails_closed_on_malformed_headers(changed: dict[str, str], why: str) -> None:
    headers = sign(WebhookSecret(SECRET), "evt_1", BODY, timestamp=NOW) | changed
    with pytest.raises(SignatureInvalid, match=why):
        StandardWebhooks(SECRET, clock=lambda: NOW).verify(headers, BODY)


def test_the_standardwebhooks_library_and_our_signatures_accept_each_other() -> None:
    spec_moment = datetime.fromtimestamp(SPEC_TIMESTAMP, tz=UTC)
    assert Webhook(SPEC_SECRET).sign(SPEC_ID, spec_moment, SPEC_BODY) == SPEC_SIGNATURE
    theirs = Webhook(SECRET).sign("evt_9", datetime.fromtimestamp(NOW, tz=UTC), BODY)
    headers = {"webhook-id": "evt_9", "webhook-timestamp": str(NOW), "webhook-signature": theirs}
    StandardWebhooks(SECRET, clock=lambda: NOW).verify(headers, BODY)
    assert verify(WebhookSecret(SECRET), headers, BODY, now=NOW) == "evt_9"

    ours = sign(WebhookSecret(SECRET), "evt_2", BODY, timestamp=int(time.time()))
    assert Webhook(SECRET).verify(BODY, ours) == {"id": "evt_1", "type": "payment.succeeded"}
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET).verify(BODY + b" ", ours)
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SPEC_SECRET).verify(BODY, ours)


def test_a_timestamp_past_the_year_9999_is_refused_as_malformed_even_within_the_tolerance() -> None:
    stamp = 999_999_999_999
    headers = {"webhook-id": "evt_1", "webhook-timestamp": str(stamp), "webhook-signature": "v1,AAAA"}
    with pytest.raises(SignatureInvalid, match="past the year 9999"):
        StandardWebhooks(SECRET, tolerance=10, clock=lambda: stamp).verify(headers, BODY)
    with pytest.raises(ValueError, match="between the years 1 and 9999"):
        sign(WebhookSecret(SECRET), "evt_1", BODY, timestamp=stamp)


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        ("whsec_YWI=", "at least 24 bytes"),
        ("whsec_MDEyMzQ1Njc4OWFiY2RlZjAx!MjM0NTY3ODlhYmNkZWY=", "not base64"),
        ("whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY", "not base64"),
    ],
)
def test_a_secret_the_library_would_take_as_it_is_written_is_refused(secret: str, why: str) -> None:
    Webhook(secret)
    with pytest.raises(ValueError, match=why):
        WebhookSecret(secret)
