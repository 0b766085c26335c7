"""The key a relayed question is recorded under: its position in the call and what it asks, nothing else."""

from __future__ import annotations

from mcp_elicit.gateway.questions import question_key

FORM = {"mode": "form", "message": "How many?", "requestedSchema": {"type": "object", "properties": {}}}
URL = {"mode": "url", "message": "Pay 5 EUR", "url": "https://payments.example/checkout", "elicitationId": "pay-5"}


def test_the_same_question_at_the_same_place_is_the_same_decision() -> None:
    assert question_key(0, FORM) == question_key(0, dict(FORM))
    assert question_key(0, URL) == question_key(0, {**URL, "elicitationId": "pay-5-again"})  # an id a re-run mints
    assert question_key(0, FORM).startswith("q1.") and question_key(2, FORM).startswith("q3.")


def test_a_changed_question_or_place_is_a_new_decision() -> None:
    keys = {
        question_key(0, FORM),
        question_key(1, FORM),
        question_key(0, {**FORM, "message": "How many now?"}),
        question_key(0, {**FORM, "requestedSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}),
        question_key(0, URL),
        question_key(0, {**URL, "url": "https://payments.example/other"}),
    }
    assert len(keys) == 6
