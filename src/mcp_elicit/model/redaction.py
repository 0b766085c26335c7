"""The one place that decides what is redacted.

Guarantees: content of a form field that is declared sensitive, or whose name looks like a secret, is
replaced by `REDACTED`; URLs lose their user-info, every query value and the fragment (OAuth codes,
states, signed links live there); free text has every URL inside it treated the same way. "Looks like a
secret" is one rule over one vocabulary (`SECRET_WORDS`, `SECRET_NAMES`, `looks_secret`): the forms refuse
what it names and redaction hides it, so an answer a form may ask for is one the audit trail may show.

Does not guarantee: that free text without a URL is free of secrets. Callers must not put secrets in
reasons; the vocabulary here only catches what looks like one.
"""

import functools
import itertools
import re
from collections.abc import Collection, Mapping
from typing import Final, Literal, TypeAlias
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mcp_elicit.model.json import JSONObject, JSONValue

REDACTED = "[redacted]"

ValueKind: TypeAlias = Literal["text", "number", "boolean"]
"""What a field holds, as far as secrets go: a yes/no carries none, and only some secrets can be all digits."""

TEXT: Final = "text"
DIGITS: Final = "digits"

SECRET_WORDS: Mapping[str, Literal["text", "digits"]] = {
    "password": DIGITS, "passwd": DIGITS, "pwd": DIGITS, "passcode": DIGITS, "passphrase": TEXT,
    "secret": DIGITS, "token": TEXT, "apikey": TEXT, "accesskey": TEXT, "privatekey": TEXT, "credential": TEXT,
    "bearer": TEXT, "cookie": TEXT, "session": TEXT, "sessionid": TEXT, "signature": TEXT,
    "otp": DIGITS, "totp": DIGITS, "mfa": DIGITS, "pin": DIGITS, "recoverycode": DIGITS, "backupcode": DIGITS,
    "seedphrase": TEXT, "mnemonic": TEXT,
    "card": TEXT, "cardnumber": DIGITS, "creditcard": DIGITS, "pan": DIGITS, "cvv": DIGITS, "cvc": DIGITS,
    "iban": TEXT, "ssn": DIGITS,
}  # fmt: skip
"""The one vocabulary of secrets: each word as it reads once a name's snake, camel or kebab case words are
lower-cased and one word is joined to the next (`api_key`, `apiKey`, `API-Key` all give `apikey`).

`DIGITS` marks a secret that can be all digits (a PIN, a card number, a one-time code), so that a number
field so named asks for the secret itself; a number named with a `TEXT` word (`max_tokens`, "How many
tokens to mint", `session_minutes`) counts or measures something and asks for no secret.
"""

SECRET_NAMES: frozenset[str] = frozenset({"auth", "authorization", "xauth", "xauthorization", "proxyauthorization"})
"""Secrets only as a whole name, words joined as for `SECRET_WORDS` (`auth`, `Authorization`, `X-Authorization`):
the credential an HTTP `Authorization` header carries. As one word of a longer name they name something about
it (`auth_method`, `auth_type`, `authorization_url`), and inside a word (`author`, `authority`) nothing."""

_WORD_SPLIT = re.compile(
    r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z]{2})|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])"
)
_URL = re.compile(r"\bhttps?://[^\s\"'<>]+", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return [word.lower() for word in _WORD_SPLIT.split(text) if word]


def looks_secret(name: str, description: str | None = None, *, kind: ValueKind = "text") -> bool:
    """Whether a field's name or description marks it as a secret (password, token, API key, card...).

    Words match whole (`pin`, never the one in `spinner` or `shipping`), alone or joined to the next word
    (`private_key`), singular or plural (`api_keys`), with the field's `kind` deciding what can be a secret:
    a boolean never is, a number only by a `DIGITS` word in the singular (`pin`, `card_number`, not
    `max_tokens` nor `pins`, which count), text by any word of `SECRET_WORDS` or a whole `SECRET_NAMES`
    name (`authorization`, not `auth_method`).
    """
    if kind == "boolean":
        return False
    return _text_looks_secret(name, kind) or (description is not None and _text_looks_secret(description, kind))


def kind_of(value: JSONValue) -> ValueKind:
    """The kind of an answer's value, for `looks_secret`."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "text"


@functools.lru_cache(maxsize=4096)
def _text_looks_secret(text: str, kind: ValueKind) -> bool:
    words = _words(text)
    candidates = itertools.chain(words, (a + b for a, b in itertools.pairwise(words)))
    if kind == "number":
        return any(SECRET_WORDS.get(word) == DIGITS for word in candidates)
    return _named_by("".join(words), SECRET_NAMES) or any(_named_by(word, SECRET_WORDS) for word in candidates)


def forget_verdicts() -> None:
    """Forget the verdicts `looks_secret` keeps for names it has seen (the vocabulary never changes while a
    process runs, so a verdict once made stands). For a process that runs the rule while its code changes, a
    mutation-testing run: there a verdict kept from before the change would hide it."""
    _text_looks_secret.cache_clear()


def _named_by(word: str, vocabulary: Collection[str]) -> bool:
    return word in vocabulary or (word.endswith("s") and word[:-1] in vocabulary)


def redact_content(content: JSONObject, sensitive_fields: tuple[str, ...] = ()) -> JSONObject:
    sensitive = set(sensitive_fields)
    return {
        key: REDACTED if key in sensitive or looks_secret(key, kind=kind_of(value)) else _redact_value(value)
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
