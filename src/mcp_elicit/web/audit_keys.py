"""The audit's public keys, published at `/.well-known/mcp-elicit/audit-keys` for whoever verifies the trail.

Verifying needs no secret: `mcp-elicit audit verify --keys https://host/.well-known/mcp-elicit/audit-keys`
checks every checkpoint's signature against this document. It lists every key of the ring (the newest signs),
so checkpoints signed before a rotation still verify. Keep a copy apart from the server as well: whoever
controls the server could publish a key of their own.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp_elicit.model.audit_keys import KEYS_PATH, AuditPublicKeys


def audit_keys_routes(keys: AuditPublicKeys) -> list[Route]:
    """The route that answers `GET` with `keys.document()`."""
    document = keys.document()

    async def published(request: Request) -> JSONResponse:
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})

    return [Route(KEYS_PATH, published, methods=["GET"])]
