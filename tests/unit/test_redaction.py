"""Which names read as secrets, whole or in the plural, and what of a URL an audit row may keep."""

from __future__ import annotations

import random
import string
from collections.abc import Iterator

import pytest

from mcp_elicit.model import (
    REDACTED,
    JSONObject,
    looks_like_credential,
    looks_secret,
    redact_content,
    redact_text,
    redact_url,
)
from mcp_elicit.model.redaction import forget_verdicts


@pytest.fixture(autouse=True)
def uncached() -> Iterator[None]:
    """Each test sees the rule itself decide, not an answer an earlier test left in its cache."""
    forget_verdicts()
    yield
    forget_verdicts()


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True),
        ("tokens", True),
        ("api_keys", True),
        ("Authorization", True),
        ("approve", False),
        ("status", False),
        ("address", False),
        ("auth_method", False),
        ("s", False),
    ],
)
def test_a_name_is_a_secret_by_a_whole_word_or_its_plural(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


def test_a_number_is_a_secret_only_by_a_word_that_can_be_all_digits_in_name_or_description() -> None:
    assert looks_secret("code", "Your PIN", kind="number")
    assert not looks_secret("count", "How many tokens to mint", kind="number")
    assert not looks_secret("password", "Your password", kind="boolean")


def test_content_is_judged_by_what_each_value_holds() -> None:
    content: JSONObject = {"pin": True, "code": 1234, "max_tokens": 5, "tokens": "5", "card_number": 4111, "note": "n"}
    assert redact_content(content) == {
        "pin": True,
        "code": 1234,
        "max_tokens": 5,
        "tokens": REDACTED,
        "card_number": REDACTED,
        "note": "n",
    }


def test_a_url_keeps_its_shape_and_loses_every_value() -> None:
    assert redact_url("https://h.example/p?flag=&x=1#f") == f"https://h.example/p?flag={REDACTED}&x={REDACTED}"
    assert redact_url("https:///p?x=1") == f"https:///p?x={REDACTED}"


@pytest.mark.parametrize(
    "text",
    [
        "Bearer abc.def-ghi123",
        "Bearer abcdefghijklmnop",
        "bearer 9f8e7d6c5b4a",
        "Basic dXNlcjpwYXNz",  # user:pass
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "sk_live_51HfakeKEY0123456789",
        "sk-proj-abcdefghijklmnop1234",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "github_pat_11ABCDEFG0123456789_abcdefghij",
        "xoxb-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA1234567890abcdefghijklmnopqrstu",
        "glpat-abcdefghij0123456789",
        "sk9Fq2LmZ0xY7vBn3KpR5tWc8HdJ1gAe",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ],
)
def test_a_credential_is_redacted_by_its_shape_wherever_it_stands(text: str) -> None:
    assert looks_like_credential(text)
    assert redact_text(f"said {text} then") == f"said {REDACTED} then"


@pytest.mark.parametrize(
    "text",
    [
        "Use basic authentication please",
        "bearer authentication",
        "the basic 2024-01-01 plan",
        "basic v1.2.3-beta",
        "123e4567-e89b-12d3-a456-426614174000",  # a UUID
        "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",  # a commit
        "test_Questions_asked_before_schema_8_x",
        "ApprovalNeededForRegionEU2025Deployment",
        "Release-Notes-2024-Q3-Final-Version",
        "X509CertificateVerificationFailedError2",
        "SELECT_count_FROM_users_WHERE_id_42",
    ],
)
def test_ids_names_and_prose_are_no_credentials(text: str) -> None:
    assert not looks_like_credential(text)
    assert redact_text(text) == text


def test_a_private_key_goes_whole_and_a_url_of_any_scheme_loses_its_password() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIE+abc/def\nXyZ+01/23==\n-----END RSA PRIVATE KEY-----"
    assert redact_text(f"key: {pem} (rotated)") == f"key: {REDACTED} (rotated)"
    assert redact_text("-----BEGIN PRIVATE KEY-----\nMIIE+abc/def cut off") == REDACTED
    assert redact_text("db postgres://admin:hunter2@db.internal:5432/prod?sslmode=require") == (
        f"db postgres://db.internal:5432/prod?sslmode={REDACTED}"
    )
    assert redact_text("redis://:pw@cache:6379/0 amqp://u:p@mq/vhost") == "redis://cache:6379/0 amqp://mq/vhost"


def test_a_credential_used_as_a_key_is_redacted_too() -> None:
    token = "ghp_" + "A1" * 18
    assert redact_content({"headers": {token: True, "x": 1}, token: "b"}) == {
        "headers": {REDACTED: True, "x": 1},
        REDACTED: "b",
    }


@pytest.mark.parametrize(
    ("alphabet", "length"),
    [(string.ascii_letters + string.digits, 32), (string.ascii_letters + string.digits, 64),
     (string.ascii_letters + string.digits + "-_", 43), (string.ascii_letters + string.digits + "+/", 32)],
    ids=["base62-32", "base62-64", "base64url-43", "base64-32"],
)  # fmt: skip
def test_generated_keys_read_as_keys_nearly_always(alphabet: str, length: int) -> None:
    """The shape rule is a heuristic: measured over many keys (a fixed seed, so the figure is the same every run)."""
    chosen = random.Random(f"{alphabet}{length}")
    keys = ["".join(chosen.choice(alphabet) for _ in range(length)) for _ in range(1000)]
    found = sum(looks_like_credential(key) for key in keys)
    assert found >= 970, f"{1000 - found} of 1000 generated keys read as words"


def test_a_person_who_must_see_what_a_url_does_sees_every_query_value_that_cannot_be_a_secret() -> None:
    url = "https://user:pw@bank.example/pay?amount=1000000&memo=rent&code=4711&sig=abc&access_token=t#frag"
    assert redact_url(url, query="secret") == (
        f"https://bank.example/pay?amount=1000000&memo=rent&code={REDACTED}&sig={REDACTED}&access_token={REDACTED}"
    )
    assert redact_url(url) == (
        f"https://bank.example/pay?amount={REDACTED}&memo={REDACTED}&code={REDACTED}&sig={REDACTED}"
        f"&access_token={REDACTED}"
    ), "what an audit row keeps: no query value at all"
    assert redact_url("https://x.example/?next=sk_live_51HfakeKEY0123456789", query="secret") == (
        f"https://x.example/?next={REDACTED}"
    )
