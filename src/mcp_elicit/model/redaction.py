"""The one place that decides what is redacted.

Guarantees: content of a form field that is declared sensitive, or whose name looks like a secret, is
replaced by `REDACTED`; URLs lose their user-info, every query value and the fragment (OAuth codes,
states, signed links live there); free text has every URL inside it treated the same way.

Does not guarantee: that free text without a URL is free of secrets. Callers must not put secrets in
reasons; the vocabulary here only catches what looks like one.
"""

import functools
import itertools
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mcp_elicit.model.json import JSONObject, JSONValue

REDACTED = "[redacted]"

_SECRET_WORDS = frozenset(
    {
        "password", "passwd", "passphrase", "secret", "token", "apikey", "credential", "credentials",
        "cvv", "cvc", "ssn", "pin", "otp", "iban", "privatekey", "accesskey", "cardnumber", "creditcard",
        "card", "pan", "bearer", "cookie", "session", "sessionid", "signature", "mfa", "totp",
    }
)  # fmt: skip
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_URL = re.compile(r"\bhttps?://[^\s\"'<>]+", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return [word.lower() for word in _WORD_SPLIT.split(text) if word]


def looks_secret(name: str, description: str | None = None) -> bool:
    """Whether a field's name or description marks it as a secret (password, token, API key, card...)."""
    return _text_looks_secret(name) or (description is not None and _text_looks_secret(description))


@functools.lru_cache(maxsize=4096)
def _text_looks_secret(text: str) -> bool:
    words = _words(text)
    joined_pairs = {a + b for a, b in itertools.pairwise(words)}
    return bool(_SECRET_WORDS.intersection(words) or _SECRET_WORDS.intersection(joined_pairs))


def redact_content(content: JSONObject, sensitive_fields: tuple[str, ...] = ()) -> JSONObject:
    sensitive = set(sensitive_fields)
    return {
        key: REDACTED if key in sensitive or looks_secret(key) else _redact_value(value)
        for key, value in content.items()
    }


def _redact_value(value: JSONValue) -> JSONValue:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return redact_content(value)
    if isinstance(value, list):
        return [_redact_value(item) for item in value]
    return value


def redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return REDACTED
    if ":" in host:
        host = f"[{host}]"
    redacted_query = urlencode([(key, REDACTED) for key, _ in query], safe="[]")
    return urlunsplit((parts.scheme, host + port, parts.path, redacted_query, ""))


def redact_text(text: str) -> str:
    return _URL.sub(lambda match: redact_url(match.group(0)), text)
