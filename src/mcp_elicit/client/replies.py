"""Turning a handler's reply into what goes on the wire, and refusing to send what the server did not ask for.

A form answer is checked before it leaves the client: against the server's `requestedSchema` (JSON Schema,
formats included) and against its property list (a key the server did not ask for is never sent, so a
handler cannot leak extra data). Fields the person left out that the schema gives a `default` for are
filled with that default first (SEP-1034): the form showed the default, so leaving it is choosing it.

An invalid answer is a handler bug, not a decision. The kit then asks the handler again with the
problem in `FormRequest.problem`, at most `MAX_INVALID_REPLIES` times in all, and if no valid answer comes
answers `cancel` (nobody validly decided) and logs an error; invalid content is never sent and no answer is
made up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import SchemaError
from mcp_types import ElicitResult

from mcp_elicit.client.handler import Accept, Cancel, Consent, Decline, FormReply, JsonValue, UrlReply

MAX_INVALID_REPLIES = 3


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why the server's `requestedSchema` cannot be used to check an answer, or None."""
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), Mapping):
        return "requestedSchema must be an object schema with properties"
    try:
        validators.validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as invalid:
        return f"requestedSchema is not a valid JSON Schema: {invalid.message}"
    return None


def with_defaults(content: Mapping[str, JsonValue], schema: Mapping[str, Any]) -> dict[str, JsonValue]:
    """The content with every left-out property that has a schema default filled with it."""
    filled = dict(content)
    for name, prop in schema.get("properties", {}).items():
        if name not in filled and isinstance(prop, Mapping) and "default" in prop:
            filled[name] = prop["default"]
    return filled


def content_problems(content: Mapping[str, JsonValue], schema: Mapping[str, Any]) -> list[str]:
    """Everything wrong with `content` as an answer to `schema`, in a person-readable form; empty if valid."""
    properties = schema.get("properties", {})
    problems = [f"{name}: was not asked for" for name in content if name not in properties]
    validator = validators.validator_for(schema, default=Draft202012Validator)(schema, format_checker=FormatChecker())
    for error in sorted(validator.iter_errors(dict(content)), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(part) for part in error.absolute_path) or "the answer"
        problems.append(f"{where}: {error.message}")
    return problems


def form_result(reply: FormReply, content: Mapping[str, JsonValue] | None = None) -> ElicitResult:
    """The wire answer to a form; `content` is the checked content of an `Accept`."""
    match reply:
        case Accept():
            return ElicitResult(action="accept", content=dict(content if content is not None else reply.content))
        case Decline():
            return ElicitResult(action="decline")
        case Cancel():
            return ElicitResult(action="cancel")
    raise TypeError(f"a form handler must return Accept, Decline or Cancel, not {type(reply).__name__}")


def url_result(reply: UrlReply) -> ElicitResult:
    """The wire answer to a URL elicitation: consent is `accept` without content (it is not completion)."""
    match reply:
        case Consent():
            return ElicitResult(action="accept")
        case Decline():
            return ElicitResult(action="decline")
        case Cancel():
            return ElicitResult(action="cancel")
    raise TypeError(f"a URL handler must return Consent, Decline or Cancel, not {type(reply).__name__}")
