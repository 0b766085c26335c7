"""Which names read as secrets, whole or in the plural, and what of a URL an audit row may keep."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcp_elicit.model import REDACTED, JSONObject, looks_secret, redact_content, redact_url
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
