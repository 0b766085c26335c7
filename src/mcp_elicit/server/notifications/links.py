"""Signed links to a decision's page, which take a person from a chat message or an e-mail to `/elicit/{id}`.

A link is the page's own address with two query parameters: `until`, the decision's deadline (whole seconds since
1970, when the link lapses), and `sig`, the HMAC-SHA256 of the decision's id and `until`, base64url. Its key is
derived from the key the pages already have (`WebPages(page_key=...)`, or a deployment's key ring), under a label of
its own, so it signs nothing else and nothing else signs links.

Guarantees: the page tells a link this server issued from one made up or altered (another id, deadline or
signature: `LinkCheck.INVALID`, compared in constant time) and from one that lapsed (`LinkCheck.LAPSED`). With a
key ring the first key signs and every key checks, so rotating the ring does not break links already sent.

Does not guarantee: anything about who holds the link. It authorizes nothing and opening it changes nothing: chat
unfurlers and mail scanners open links, so the page does what it does for any browser (sign-in first, then the
check that the person is the decision's principal, or for a decision approvers answer, one of its approvers now),
and a link forwarded to someone else shows them the refusal any other account gets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["MIN_LINK_KEY_BYTES", "DecisionLinks", "LinkCheck"]

MIN_LINK_KEY_BYTES = 32
UNTIL, SIGNATURE = "until", "sig"
_LABEL = b"mcp-elicit/notifications/links/v1"
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class LinkCheck(Enum):
    """What a decision page makes of the link it was opened with."""

    ABSENT = "absent"
    """Opened without one (from the inbox, from the assistant): the page as always."""
    VALID = "valid"
    LAPSED = "lapsed"
    """Issued here, for a deadline that has passed."""
    INVALID = "invalid"
    """Not issued here, or altered on the way."""


class DecisionLinks:
    """Signs the links notifications carry, and checks them when a page is opened with one.

    `public_base_url` is the origin browsers reach the pages at (the `Elicitation`'s `public_base_url`); `keys` the
    pages' key (`WebPages.page_key`) or a key ring, newest first, each of at least 32 bytes.
    """

    __slots__ = ("_base", "_keys")

    def __init__(self, public_base_url: str, keys: bytes | Sequence[bytes]) -> None:
        self._base = _checked_base_url(public_base_url)
        ring = [keys] if isinstance(keys, bytes) else list(keys)
        if not ring:
            raise ValueError("decision links need a key: the pages' page_key, or a key ring")
        for index, key in enumerate(ring):
            if not isinstance(key, bytes) or len(key) < MIN_LINK_KEY_BYTES:
                size = f"{len(key)} bytes" if isinstance(key, bytes) else type(key).__name__
                raise ValueError(f"decision link key {index + 1} has {size}; give at least {MIN_LINK_KEY_BYTES} bytes")
        self._keys = tuple(hmac.new(key, _LABEL, hashlib.sha256).digest() for key in ring)

    def __repr__(self) -> str:
        return f"DecisionLinks({self._base!r}, ...)"

    @property
    def public_base_url(self) -> str:
        return self._base

    def link(self, elicitation_id: str, until: datetime) -> str:
        """The signed address of the decision's page, lapsing at `until` (its deadline)."""
        stamp = int(until.timestamp())
        query = urlencode({UNTIL: stamp, SIGNATURE: self._signature(self._keys[0], elicitation_id, stamp)})
        return f"{self._base}/elicit/{quote(elicitation_id, safe='')}?{query}"

    def check(self, elicitation_id: str, query: Mapping[str, str], now: datetime) -> LinkCheck:
        """What the page at `elicitation_id`, opened with `query`, was opened with; a lapse is judged at `now`."""
        until, signature = query.get(UNTIL), query.get(SIGNATURE)
        if until is None and signature is None:
            return LinkCheck.ABSENT
        if not until or not signature or not (until.isascii() and until.isdigit()) or len(until) > 12:
            return LinkCheck.INVALID
        stamp = int(until)
        given = signature.encode("ascii", "replace")
        if not any(
            hmac.compare_digest(self._signature(key, elicitation_id, stamp).encode(), given) for key in self._keys
        ):
            return LinkCheck.INVALID
        return LinkCheck.VALID if now.timestamp() < stamp else LinkCheck.LAPSED

    @staticmethod
    def _signature(key: bytes, elicitation_id: str, stamp: int) -> str:
        mac = hmac.new(key, f"{elicitation_id}\x00{stamp}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _checked_base_url(url: str) -> str:
    """The rule `Elicitation(public_base_url=...)` applies: http(s), HTTPS outside loopback, the origin alone."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a decision link's public_base_url must be an http(s) URL, got {url!r}")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        raise ValueError(f"a decision link's public_base_url must use HTTPS outside loopback, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("a decision link's public_base_url carries no query, fragment or credentials")
    return url.rstrip("/")
