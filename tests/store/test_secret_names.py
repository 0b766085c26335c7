"""One vocabulary of secrets: what the forms refuse by name is what the audit trail redacts by name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, Field, create_model

from mcp_elicit.model import REDACTED, DecisionStatus, JSONValue, Operator, looks_secret, redact_content
from mcp_elicit.model.redaction import DIGITS, SECRET_WORDS
from mcp_elicit.server.forms import SecretField, form_spec
from mcp_elicit.store import Store
from tests.helpers.records import ALICE, Records

DIGIT_WORDS = sorted(word for word, kind in SECRET_WORDS.items() if kind == DIGITS)
TEXT_WORDS = sorted(word for word, kind in SECRET_WORDS.items() if kind != DIGITS)


def form(name: str, annotation: Any, **field: Any) -> type[BaseModel]:
    definitions: dict[str, Any] = {name: (annotation, Field(**field))}
    model: type[BaseModel] = create_model("Asked", **definitions)
    return model


def refused(model: type[BaseModel]) -> bool:
    try:
        form_spec(model)
    except SecretField:
        return True
    return False


@pytest.mark.parametrize("word", sorted(SECRET_WORDS))
def test_every_word_of_the_table_refuses_a_text_field_and_is_redacted(word: str) -> None:
    assert refused(form(word, str))
    assert refused(form(f"{word}s", str)), "plural"
    assert refused(form("value", str, description=f"Your {word}"))
    assert redact_content({word: "hunter2", "note": "kept"}) == {word: REDACTED, "note": "kept"}


@pytest.mark.parametrize("word", DIGIT_WORDS)
def test_a_secret_that_can_be_all_digits_refuses_a_number_field_and_is_redacted(word: str) -> None:
    assert refused(form(word, int))
    assert redact_content({word: 1234}) == {word: REDACTED}


@pytest.mark.parametrize("word", TEXT_WORDS)
def test_a_number_named_by_a_text_only_secret_counts_it_and_is_shown(word: str) -> None:
    form_spec(form(word, int))
    assert redact_content({word: 5}) == {word: 5}


@pytest.mark.parametrize(
    "name",
    [
        "pwd", "passcode", "otp", "pin", "recovery_code", "backup_code", "cvv", "cvc", "iban", "ssn",
        "private_key", "seed_phrase", "mnemonic",
        "recoveryCode", "seedPhrase", "privateKey", "userPIN", "OTPCode", "APIKey", "userPINs", "cvv2",
        "access_tokens", "api_keys",
    ],
)  # fmt: skip
def test_secret_names_in_snake_camel_and_acronym_case_are_refused(name: str) -> None:
    with pytest.raises(SecretField, match=f"its name '{name}'"):
        form_spec(form(name, str))


@pytest.mark.parametrize("text", ["recovery-code", "Seed phrase", "One-time PIN", "backup code"])
def test_kebab_and_spaced_words_in_titles_are_refused_and_redacted(text: str) -> None:
    assert refused(form("answer", str, title=text))
    assert redact_content({text: "x"}) == {text: REDACTED}


@pytest.mark.parametrize(
    "name", ["spinner", "opinion", "shipping", "topt", "pinnacle", "tokenizer", "happiness", "tokenize", "passenger"]
)
def test_a_secret_word_inside_another_word_does_not_count(name: str) -> None:
    assert not looks_secret(name)
    form_spec(form(name, str))
    assert redact_content({name: "x"}) == {name: "x"}


@pytest.mark.parametrize(
    "name",
    [
        "auth", "Auth", "AUTH", "authorization", "Authorization", "AUTHORIZATION", "authorizations",
        "x_authorization", "X-Authorization", "xAuthorization", "XAuthorization", "x-auth",
        "proxy_authorization", "Proxy-Authorization",
    ],
)  # fmt: skip
def test_a_field_named_for_the_authorization_header_is_refused_and_redacted(name: str) -> None:
    with pytest.raises(SecretField, match=f"its name '{name}'"):
        form_spec(form(name, str))
    assert refused(form("value", str, title=name))
    assert redact_content({name: "Bearer abc", "note": "kept"}) == {name: REDACTED, "note": "kept"}


@pytest.mark.parametrize(
    "name",
    [
        "auth_method", "authMethod", "auth_type", "AuthType", "auth_provider", "authorization_url",
        "authorization_status", "Authorization status", "author", "authors", "authority", "authored_by",
        "co_author", "oauth", "oauth_provider", "unauthorized", "authorize",
    ],
)  # fmt: skip
def test_auth_as_one_word_of_a_longer_name_or_inside_a_word_does_not_count(name: str) -> None:
    assert not looks_secret(name)
    form_spec(form(name, str))
    assert redact_content({name: "password-free"}) == {name: "password-free"}


def test_a_number_or_a_yes_no_named_auth_asks_for_no_secret() -> None:
    form_spec(form("auth", int))
    form_spec(form("authorization", bool))


@pytest.mark.parametrize(
    ("name", "annotation", "description"),
    [
        ("count", int, "How many tokens to mint"),
        ("max_tokens", int, None),
        ("tokens", int, None),
        ("session_minutes", int, None),
        ("pins", int, "How many PINs to issue"),
        ("temperature", float, "Sampling temperature per token"),
        ("rotate_token", bool, "Rotate the API token now"),
        ("remember_password", bool, None),
    ],
)
def test_numbers_that_count_and_booleans_ask_for_no_secret(name: str, annotation: Any, description: str | None) -> None:
    form_spec(form(name, annotation, description=description))


@pytest.mark.parametrize(
    ("name", "annotation", "description"),
    [
        ("pin", int, None),
        ("card_number", int, None),
        ("value", int, "The CVV on the back of the card"),
        ("otp", int, "The code from your authenticator app"),
        ("pin_count", int, None),
    ],
)
def test_a_number_that_can_be_the_secret_is_refused(name: str, annotation: Any, description: str | None) -> None:
    """`pin_count` too: a number with a digits-secret word in the singular may be the secret; say `pins`."""
    assert refused(form(name, annotation, description=description))


def test_redaction_follows_the_value_kind(store: Store, records: Records) -> None:
    content: dict[str, JSONValue] = {
        "pin": 1234, "max_tokens": 5, "remember_password": True, "recovery-code": "abcd-efgh", "note": "ok",
        "nested": {"seedPhrase": "correct horse", "cards": 2},
    }  # fmt: skip
    expected = {
        "pin": REDACTED, "max_tokens": 5, "remember_password": True, "recovery-code": REDACTED, "note": "ok",
        "nested": {"seedPhrase": REDACTED, "cards": 2},
    }  # fmt: skip
    assert redact_content(content) == expected
    decision = records.form(ttl=timedelta(minutes=5))
    store.transition(decision, DecisionStatus.ACCEPTED, caller=ALICE, content=content)
    accepted = store.audit_trail(decision.elicitation_id, Operator())[-1]
    assert accepted.details["content"] == expected
