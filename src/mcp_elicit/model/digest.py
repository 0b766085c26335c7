"""Digests of canonical request parameters.

A retry has to find its operation by what was asked, while the store must never hold what was asked.
The digest of a canonical JSON encoding gives both: equal parameters give equal digests whatever the
key order, and the parameters cannot be read back from it.
"""

import hashlib
import json
from collections.abc import Mapping


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def request_digest(method: str, params: Mapping[str, object]) -> str:
    """Digest of a request's method and parameters, with the `_meta` envelope left out.

    `_meta` carries per-attempt data (progress tokens, client capabilities, request state) that
    differs between a call and its retry, so it must not change the identity of the request.
    """
    significant = {key: value for key, value in params.items() if key != "_meta"}
    encoded = canonical_json({"method": method, "params": significant}).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()
