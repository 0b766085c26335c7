"""The plaintext of a 2026-07-28 `requestState`: a pointer into the store, never the state itself.

The SDK's `RequestStateBoundary` seals this text (AEAD under the shared key ring, bound to the principal,
the tool, its arguments and a TTL) before it leaves the server, and unseals it before we see it. What we
add is what the boundary cannot know: which operation the round belongs to, what it asked, and a random
round nonce that the store's ledger lets through exactly once.

`asked` maps every input request key of the round to what the retry's response for that key must answer:
a decision's elicitation id (a UUID), or, for a question to the client itself, the request's method
(`sampling/createMessage`, `roots/list`: never a UUID). A response is applied only when its key is in
the map and it answers what the map names; the nonce makes the whole map usable once.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

VERSION = 1
REFUSED = "Invalid or expired requestState"


@dataclass(frozen=True, slots=True)
class RoundState:
    operation_id: str
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    asked: dict[str, str] = field(default_factory=dict)
    """Input request key → the asked decision's elicitation id, or the method of a query to the client."""

    def encode(self) -> str:
        return json.dumps(
            {"v": VERSION, "op": self.operation_id, "n": self.nonce, "ask": self.asked}, separators=(",", ":")
        )

    @property
    def ledger_id(self) -> str:
        return f"round:{self.nonce}"

    @classmethod
    def decode(cls, text: str) -> RoundState:
        """Parse unsealed state; anything but our exact shape is refused like a forged token."""
        try:
            raw = json.loads(text)
        except ValueError:
            raise refused() from None
        if not isinstance(raw, dict) or raw.get("v") != VERSION:
            raise refused()
        operation_id, nonce, asked = raw.get("op"), raw.get("n"), raw.get("ask")
        if not isinstance(operation_id, str) or not isinstance(nonce, str) or not isinstance(asked, dict):
            raise refused()
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in asked.items()):
            raise refused()
        return cls(operation_id=operation_id, nonce=nonce, asked=dict(asked))


def refused() -> MCPError:
    """The same answer the SDK's boundary gives, so a replay looks exactly like a forgery from outside."""
    return MCPError(code=INVALID_PARAMS, message=REFUSED, data={"reason": "invalid_request_state"})
