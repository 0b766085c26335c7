"""What a call is about, in one line a person reads before answering: the tool and a short summary of its arguments.

It is rendered when a question is asked and stored with the decision as part of what the person is shown, so the
inbox, the decision page and the operator's listing say what the call is about while neither the decision nor
the operation holds the arguments themselves (the operation keeps their digest; only a call run as a task keeps
them, in its task's record, to run its body again).

Guarantees: an argument whose name looks like a secret, and a value or key shaped like a credential, are redacted
by the one redaction rule (`redact_content`), as are a URL's credentials, query values and fragment; characters that
could hide or reorder text are shown by code point (`printable`); the line holds at most `MAX_SUMMARY` characters,
one value at most `MAX_VALUE`, and says when it leaves arguments out.

Does not guarantee: that an argument holds no secret the rule cannot see (a password passed as `note`). A tool
should not take secrets as arguments at all: they pass through the model; URL mode is the way to ask for them.
"""

import json
from collections.abc import Mapping
from typing import Final

from mcp_elicit.model.json import JSONValue
from mcp_elicit.model.redaction import REDACTED, redact_content
from mcp_elicit.printable import printable

MAX_SUMMARY: Final = 200
MAX_VALUE: Final = 60
MAX_RENDERED: Final = 2000
"""At most this many characters of one argument's value in `render_arguments`; the rest is counted, not shown."""
_MAX_NAME: Final = 40
_MORE: Final = "…"


def summarize_call(name: str, arguments: JSONValue) -> str:
    """`name(argument=value, ...)`, redacted and shortened to fit one line of a page."""
    shown = redact_content(arguments) if isinstance(arguments, dict) else {}
    head = _shortened(printable(name), _MAX_NAME)
    parts = [f"{_shortened(printable(key), _MAX_NAME)}={_value(value)}" for key, value in shown.items()]
    line = f"{head}({', '.join(parts)})"
    while len(line) > MAX_SUMMARY:
        parts.pop()
        line = f"{head}({', '.join([*parts, _MORE])})"
    return line


def render_arguments(arguments: Mapping[str, JSONValue]) -> list[str]:
    """Every argument on a line of its own, `name: value` with the value as JSON, redacted as `summarize_call`
    redacts except for a URL's query values that cannot be secrets (an amount in a payment link stays in view);
    a value longer than `MAX_RENDERED` says how much of it is not shown. For a question that must show the call
    it is about in full (an approval), where a summary's shortening would hide what runs."""
    lines = []
    for key, value in redact_content(dict(arguments), query="secret").items():
        text = REDACTED if value == REDACTED else printable(json.dumps(value, ensure_ascii=False))
        if len(text) > MAX_RENDERED:
            text = f"{text[:MAX_RENDERED]}… ({len(text) - MAX_RENDERED} more characters)"
        lines.append(f"{printable(key)}: {text}")
    return lines


def _value(value: JSONValue) -> str:
    if value == REDACTED:
        return REDACTED
    return _shortened(printable(json.dumps(value, ensure_ascii=False, separators=(", ", ": "))), MAX_VALUE)


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(_MORE)] + _MORE
