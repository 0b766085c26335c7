"""The plaintext of a 2026-07-28 round's `requestState`: what the server seals and must read back exactly.

The SDK's boundary seals and opens the token; this text is what travels inside it. A round sealed by one
release is opened by the next during a rolling upgrade, so its shape is pinned here, and anything else
opened from a token that the key ring accepted is refused the way a forgery is.
"""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from mcp_elicit.server.eras.mrtr_state import RoundState, refused

SEALED_TEXT = '{"v":1,"op":"op-1","n":"nonce-1","ask":{"approve":"8c4a5ed5-0d8d-4bd5-9f6e-0c6f9c9b1f1e"}}'


def test_a_round_is_written_compactly_in_its_pinned_shape() -> None:
    state = RoundState("op-1", "nonce-1", {"approve": "8c4a5ed5-0d8d-4bd5-9f6e-0c6f9c9b1f1e"})
    assert state.encode() == SEALED_TEXT


def test_a_round_reads_back_as_it_was_written() -> None:
    state = RoundState.decode(SEALED_TEXT)
    assert state == RoundState("op-1", "nonce-1", {"approve": "8c4a5ed5-0d8d-4bd5-9f6e-0c6f9c9b1f1e"})
    assert RoundState.decode(state.encode()) == state
    queried = RoundState("op-2", "nonce-2", {"model": "sampling/createMessage", "roots": "roots/list"})
    assert RoundState.decode(queried.encode()) == queried


def test_each_round_has_a_fresh_nonce_spent_under_its_own_ledger_id() -> None:
    first, second = RoundState("op-1"), RoundState("op-1")
    assert first.nonce != second.nonce and len(first.nonce) >= 24
    assert first.asked == {}
    assert first.ledger_id == f"round:{first.nonce}"


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '"op-1"',
        '{"op":"op-1","n":"x","ask":{}}',
        '{"v":2,"op":"op-1","n":"x","ask":{}}',
        '{"v":"1","op":"op-1","n":"x","ask":{}}',
        '{"v":1,"n":"x","ask":{}}',
        '{"v":1,"op":7,"n":"x","ask":{}}',
        '{"v":1,"op":"op-1","ask":{}}',
        '{"v":1,"op":"op-1","n":["x"],"ask":{}}',
        '{"v":1,"op":"op-1","n":"x"}',
        '{"v":1,"op":"op-1","n":"x","ask":["approve"]}',
        '{"v":1,"op":"op-1","n":"x","ask":{"approve":1}}',
        '{"v":1,"op":"op-1","n":"x","ask":{"approve":null}}',
    ],
)
def test_anything_but_the_exact_shape_is_refused_like_a_forgery(text: str) -> None:
    with pytest.raises(MCPError) as raised:
        RoundState.decode(text)
    assert_refusal(raised.value)


def test_the_refusal_is_the_boundarys_own_answer_to_a_forged_token() -> None:
    assert_refusal(refused())


def assert_refusal(error: MCPError) -> None:
    assert (error.error.code, error.error.message, error.error.data) == (
        -32602,
        "Invalid or expired requestState",
        {"reason": "invalid_request_state"},
    )
