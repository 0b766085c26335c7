"""The request digest is stored with every operation: its exact value is a compatibility promise.

An upgrade that changed the canonical encoding (separators, key order, escaping, the envelope) would give a
retry after the upgrade another digest than its call before it, and every operation stored until then could
no longer be found by the calls that made it. The pinned value below must therefore never change.
"""

from __future__ import annotations

import hashlib

import pytest

from mcp_elicit.model import UnencodableValue, canonical_json, check_encodable, request_digest
from mcp_elicit.model.digest import json_path

PARAMS: dict[str, object] = {
    "name": "deploy",
    "arguments": {"target": "prod", "note": "café ✓", "replicas": 3, "ratio": 0.5, "steps": [True, None, "a"]},
    "_meta": {"progressToken": 7},
}
CANONICAL = (
    '{"method":"tools/call","params":{"arguments":{"note":"café ✓","ratio":0.5,"replicas":3,'
    '"steps":[true,null,"a"],"target":"prod"},"name":"deploy"}}'
)
PINNED = "sha256:0c5c178d42071c691ca5eb809f06a7565996d035fec65b8b015b19a5c65727bb"


def test_a_known_request_has_the_digest_every_stored_operation_was_made_with() -> None:
    assert request_digest("tools/call", PARAMS) == PINNED
    assert "sha256:" + hashlib.sha256(CANONICAL.encode()).hexdigest() == PINNED


def test_the_canonical_encoding_is_compact_sorted_and_unescaped() -> None:
    envelope = {"method": "tools/call", "params": {k: v for k, v in PARAMS.items() if k != "_meta"}}
    assert canonical_json(envelope) == CANONICAL


def test_the_method_and_the_parameters_are_both_part_of_the_identity() -> None:
    arguments = {"name": "deploy", "arguments": {"target": "prod"}}
    assert request_digest("tools/call", arguments) != request_digest("prompts/get", arguments)
    assert request_digest("tools/call", {"name": "deploy"}) != request_digest("tools/call", {"name": "rollback"})


def test_only_the_meta_envelope_is_left_out() -> None:
    bare = request_digest("tools/call", {"name": "deploy"})
    assert request_digest("tools/call", {"name": "deploy", "_meta": {"progressToken": 1}}) == bare
    assert request_digest("tools/call", {"name": "deploy", "meta": {"progressToken": 1}}) != bare


def test_an_infinite_number_has_no_canonical_encoding() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"ratio": float("inf")})


def test_a_value_the_checks_cannot_name_still_fails_as_the_encoder_said() -> None:
    """An integer too long to print (Python's digit limit) has no encoding either; no path names it, so the
    encoder's own error is what the caller gets, never a digest."""
    with pytest.raises(ValueError, match="integer string conversion") as raised:
        request_digest("tools/call", {"arguments": {"n": 10**5000}})
    assert not isinstance(raised.value, UnencodableValue)


def test_unencodable_text_at_the_top_is_named_as_the_parameters() -> None:
    with pytest.raises(UnencodableValue) as raised:
        check_encodable("\udc80")
    assert raised.value.path == ()
    assert str(raised.value) == (
        "the parameters cannot be encoded: lone surrogate '\\udc80' at character 0 (text must be valid Unicode)"
    )


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ((), "the parameters"),
        (("arguments",), "arguments"),
        (("arguments", 0, "label"), "arguments[0].label"),
        (("arguments", "two words"), "arguments.'two words'"),
        ((3,), "[3]"),
    ],
)
def test_a_path_is_shown_as_one_would_write_it(path: tuple[str | int, ...], shown: str) -> None:
    assert json_path(path) == shown
