"""The one place that decides what is redacted.

Guarantees: content of a form field that is declared sensitive, or whose name looks like a secret, is
replaced by `REDACTED`; URLs of any scheme lose their user-info, every query value and the fragment (OAuth
codes, states, signed links and database passwords live there); free text has every URL inside it treated
the same way, and every word that looks like a credential by its shape (`looks_like_credential`: a bearer
token or a basic header's `user:password`, a JWT, a PEM private key to its end, a key with a well-known
vendor prefix, a run of 32 or more letters and digits that reads as random) is replaced, in values and in a
map's keys. "Looks like a secret" by name is one rule over one vocabulary (`SECRET_WORDS`, `SECRET_NAMES`,
`looks_secret`): the forms refuse what it names and redaction hides it.

Does not guarantee: that free text is free of secrets. A password is any word, a hex or lower-case key has
no shape to tell it from an id or a commit hash; callers must not put secrets in reasons, the rules here only
catch what looks like one. The shape rules can also hide what was no secret (a long random-looking id), in
an answer the audit trail keeps as much as anywhere.
"""

import base64
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
Query: TypeAlias = Literal["every", "secret"]
"""Which query values of a URL redaction replaces: every one, or only those a secret may be (see `redact_url`)."""
_SECRET_PARAMETERS: Final = frozenset(
    {"code", "state", "sig", "key", "nonce", "ticket", "jwt", "assertion", "samlresponse", "samlrequest", "hash"}
)
"""Query parameters that carry secrets by protocol (OAuth codes and states, signed-URL signatures, SAML) though
their names are no secret words."""
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
"""Any URL with an authority, whatever its scheme: a database or broker URL carries its password in user-info."""
_CREDENTIAL = re.compile(
    r"\b(?P<scheme>[Bb]earer|[Bb]asic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})"  # an Authorization header's value
    r"|\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"  # a JWT (a JSON header, base64url)
    r"|(?s:-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z))"  # a PEM key, to its end
    r"|\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}|\bsk-[A-Za-z0-9_-]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[abposr]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{30,}|\bglpat-[A-Za-z0-9_-]{16,}"
    r"|(?<![A-Za-z0-9+/=_-])(?P<run>[A-Za-z0-9+/=_-]{32,})(?![A-Za-z0-9+/=_-])"  # a long run: a key if it reads as one
)
_WORD: Final = re.compile(r"[a-z]{6,}|[A-Z]{6,}")
_VOWELS: Final = frozenset("aeiouAEIOU")
_WORDY_VOWELS: Final = 0.3
"""A long run reads as words (an identifier, a slug) when it holds a stretch of six letters of one case and at
least this share of its letters are vowels; a generated key rarely does both (about 1 in 80 of random 32-64
character base62 or base64url keys, measured), an identifier almost always does (about 40 % of English letters
are vowels, a fifth of random ones)."""


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


def redact_content(
    content: JSONObject, sensitive_fields: tuple[str, ...] = (), *, query: Query = "every"
) -> JSONObject:
    """The content with secrets replaced: values of sensitive or secret-looking names, credential-shaped keys
    (a token used as a map's key), and every value's URLs (their query values as `redact_url` says) and
    credential-shaped words."""
    sensitive = set(sensitive_fields)
    redacted: JSONObject = {}
    for key, value in content.items():
        shown = key if not looks_like_credential(key) else _unused(REDACTED, redacted)
        secret = key in sensitive or looks_secret(key, kind=kind_of(value))
        redacted[shown] = REDACTED if secret else _redact_value(value, query)
    return redacted


def _unused(key: str, taken: Mapping[str, object]) -> str:
    n = 1
    while (candidate := key if n == 1 else f"{key}#{n}") in taken:
        n += 1
    return candidate


def _redact_value(value: JSONValue, query: Query) -> JSONValue:
    if isinstance(value, str):
        return redact_text(value, query=query)
    if isinstance(value, dict):
        return redact_content(value, query=query)
    if isinstance(value, list):
        return [_redact_value(item, query) for item in value]
    return value


def redact_url(url: str, *, query: Query = "every") -> str:
    """The URL without its user-info and fragment, and with its query values replaced: every one (what an audit
    row or a log keeps), or with `query="secret"` only those a secret may be (a secret-looking or OAuth-style
    parameter name, a credential-shaped value), for a person who must see what a call does (an approval)."""
    try:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return REDACTED
    if ":" in host:
        host = f"[{host}]"
    kept = [
        (key, value if query == "secret" and not _secret_parameter(key, value) else REDACTED) for key, value in pairs
    ]
    return urlunsplit((parts.scheme, host + port, parts.path, urlencode(kept, safe="[]"), ""))


def _secret_parameter(name: str, value: str) -> bool:
    return looks_secret(name) or name.lower() in _SECRET_PARAMETERS or looks_like_credential(value)


def redact_text(text: str, *, query: Query = "every") -> str:
    redacted = _URL.sub(lambda match: redact_url(match.group(0), query=query), text)
    return _CREDENTIAL.sub(_redacted_credential, redacted)


def looks_like_credential(text: str) -> bool:
    """Whether `text` holds a word shaped like a credential (see the module's guarantees), whatever its name."""
    return any(_is_credential(match) for match in _CREDENTIAL.finditer(text))


def _redacted_credential(match: re.Match[str]) -> str:
    return REDACTED if _is_credential(match) else match.group(0)


def _is_credential(match: re.Match[str]) -> bool:
    """Whether a candidate the pattern found is one: a header value that reads as a token, a run that reads as
    random; every other alternative of the pattern is a credential by its shape alone."""
    scheme, value, run = match.group("scheme"), match.group("value"), match.group("run")
    if run is not None:
        return _reads_random(run)
    if scheme is None:
        return True
    if scheme.lower() == "basic":
        try:
            return b":" in base64.b64decode(value, validate=True)
        except ValueError:
            return False
    # "Bearer <token>" is a header; "bearer authentication" is prose: a lower-case word of letters is not a token.
    return scheme == "Bearer" or not value.isalpha()


def _reads_random(run: str) -> bool:
    """A key rather than words: upper case, lower case and digits mixed, and not read as words (see `_WORD`)."""
    if not (any(c.islower() for c in run) and any(c.isupper() for c in run) and any(c.isdigit() for c in run)):
        return False
    letters = [c for c in run if c.isalpha()]
    wordy = _WORD.search(run) is not None and sum(c in _VOWELS for c in letters) >= _WORDY_VOWELS * len(letters)
    return not wordy
