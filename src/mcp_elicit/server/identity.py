"""Who is calling: the principal every operation and decision is bound to.

Guarantees: over HTTP the principal is the subject (and issuer) of the access token the SDK verified,
together with its OAuth client id, never anything the client says about itself; on stdio it is the
explicit `LocalIdentity` the server was configured with, because the process owner is the only user.
Unauthenticated HTTP is refused unless explicitly allowed for loopback development, and then every
such call shares one documented development principal, with a warning logged the first time each host calls.

Does not guarantee: that a token's subject is a person. A service account is a principal like any other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from mcp_elicit.model import Principal

log = logging.getLogger(__name__)

LOCAL_CLIENT = "stdio"
UNKNOWN_CLIENT = "unknown-client"
"""The client of a verified token that names none: every such app shares it, so nothing is granted to it."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


@dataclass(frozen=True, slots=True)
class IdentityPolicy:
    """How principals are derived when the transport has no verified access token."""

    local_principal: str = "local-user"
    _warned: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    allow_unauthenticated_loopback: bool = False
    development_principal: str = "loopback-dev"

    def principal_for(self, request: Any | None) -> Principal:
        token = get_access_token()
        if token is not None:
            issuer = token.claims.get("iss") if isinstance(token.claims, dict) else None
            subject = token.subject
            if not subject:
                raise _refused("the access token has no subject; cannot bind elicitation state to a user")
            principal_id = f"{issuer}#{subject}" if issuer else subject
            return Principal(principal_id, token.client_id or UNKNOWN_CLIENT)
        if request is None:
            return Principal(self.local_principal, LOCAL_CLIENT)
        client = getattr(request, "client", None)
        host = getattr(client, "host", None)
        if self.allow_unauthenticated_loopback and host in LOOPBACK_HOSTS:
            level = logging.DEBUG if host in self._warned else logging.WARNING
            self._warned.add(host)
            log.log(
                level,
                "unauthenticated HTTP call from %s bound to the development principal %r",
                host,
                self.development_principal,
            )
            return Principal(self.development_principal, "loopback")
        raise _refused("elicitation over HTTP needs MCP authorization (a verified access token)")


def _refused(reason: str) -> MCPError:
    return MCPError(code=INVALID_REQUEST, message=f"Unauthenticated: {reason}")
