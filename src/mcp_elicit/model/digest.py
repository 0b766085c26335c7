"""Digests of canonical request parameters.

A retry has to find its operation by what was asked, while the store must never hold what was asked.
The digest of a canonical JSON encoding gives both: equal parameters give equal digests whatever the
key order, and the parameters cannot be read back from it.
"""

import hashlib
import json
import math
from collections.abc import Mapping


class UnencodableValue(ValueError):
    """A request parameter that has no canonical encoding, so the request has no digest: text with a lone
    surrogate (it has no UTF-8 form) or a number that is not finite (JSON has none).

    `path` leads from the parameters to the value (keys and list positions); `reason` says what is wrong
    without quoting the value.
    """

    def __init__(self, path: tuple[str | int, ...], reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{json_path(path)} cannot be encoded: {reason}")


def json_path(path: tuple[str | int, ...]) -> str:
    """`items[2].label` for `("items", 2, "label")`; text is shown as `repr` shows it, lone surrogates escaped."""
    shown = ""
    for step in path:
        if isinstance(step, int):
            shown += f"[{step}]"
        else:
            name = step if step.isidentifier() else repr(step)
            shown += f".{name}" if shown else name
    return shown or "the parameters"


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def request_digest(method: str, params: Mapping[str, object]) -> str:
    """Digest of a request's method and parameters, with the `_meta` envelope left out.

    `_meta` carries per-attempt data (progress tokens, client capabilities, request state) that
    differs between a call and its retry, so it must not change the identity of the request.
    Raises `UnencodableValue`, naming the value, for parameters that have no canonical encoding.
    """
    significant = {key: value for key, value in params.items() if key != "_meta"}
    try:
        encoded = canonical_json({"method": method, "params": significant}).encode()
    except ValueError as error:
        failure = error
    else:
        return "sha256:" + hashlib.sha256(encoded).hexdigest()
    check_encodable(significant)
    raise failure


def check_encodable(value: object, path: tuple[str | int, ...] = ()) -> None:
    """Raise `UnencodableValue` for the first value inside `value` that canonical JSON cannot encode."""
    if isinstance(value, str):
        _check_text(value, path, "")
    elif isinstance(value, float) and not math.isfinite(value):
        raise UnencodableValue(path, f"{value!r} is not a JSON number")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                _check_text(key, (*path, key), " in its name")
            check_encodable(item, (*path, key))
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value):
            check_encodable(item, (*path, position))


def _check_text(text: str, path: tuple[str | int, ...], where: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError as error:
        surrogate = text[error.start]
        raise UnencodableValue(
            path, f"lone surrogate {surrogate!r}{where} at character {error.start} (text must be valid Unicode)"
        ) from None
