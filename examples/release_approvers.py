"""A release tool that two release managers approve, never the person who asked for it (four-eyes).

Alice asks her assistant for a release; the call waits while Bob and Carol (the `release-managers`) find it in
their inbox, or follow the link a notification carries, sign in and approve. Either may lower the canary share
first: approvals count only for the same arguments, so an edit needs its own two approvals. One rejection
ends it. What runs is exactly what two of them approved, once.

    export MCP_ELICIT_USERS="alice:PW1:Alice Liddell,bob:PW2:Bob,carol:PW3:Carol" \\
           MCP_ELICIT_APPROVER_ROLES="release-managers=bob,carol" \\
           MCP_ELICIT_AUTH_KEYS=KEY MCP_ELICIT_STATE_KEYS=KEY2
    python examples/release_approvers.py          # Bob and Carol open http://127.0.0.1:8000/inbox
    mcp-elicit login http://127.0.0.1:8000/mcp    # as alice
    mcp-elicit call http://127.0.0.1:8000/mcp release --arg service=api --arg version=2.4.0

(a key: `python -c "import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"`;
`PORT` and `PUBLIC_URL` as in `connect_account.py`.) A call made on a 2025 protocol waits on the live request
for 45 seconds, then ends saying who it waits on; calling again with the same arguments attaches to the same
request. A 2026-07-28 client gets still-waiting rounds, and a task waits as long as the approval is open.
"""

import hashlib
import hmac
import os
import sys
from typing import Annotated

import uvicorn
from pydantic import Field

from mcp_elicit import ApproverRule, Elicitation, Flow, Gate, RequestState
from mcp_elicit.settings import Settings
from mcp_elicit.web import ApproverRoles, LocalAuthorizationServer, LocalUsers, WebPages, mount_web

PORT = int(os.environ.get("PORT", "8000"))
PUBLIC_URL = os.environ.get("PUBLIC_URL", f"http://127.0.0.1:{PORT}")

settings = Settings.read(only=["store", "state_keys", "auth_keys", "approver_roles"])
if not (settings.state_keys and settings.auth_keys):
    raise SystemExit("set MCP_ELICIT_STATE_KEYS and MCP_ELICIT_AUTH_KEYS (or their _FILE variants)")
elicitation = Elicitation(
    settings.store, request_state=RequestState(keys=settings.state_keys), public_base_url=PUBLIC_URL
)
auth = LocalAuthorizationServer(PUBLIC_URL, LocalUsers.from_env(), elicitation.store, signing_keys=settings.auth_keys)
server = elicitation.server("releases", **auth.mcp_server_kwargs(f"{PUBLIC_URL}/mcp"))
page_key = hmac.new(settings.auth_keys[0], b"example pages", hashlib.sha256).digest()
roles = ApproverRoles(settings.approver_roles)  # role -> usernames, from MCP_ELICIT_APPROVER_ROLES
mount_web(server, elicitation, WebPages(sign_in=auth, page_key=page_key, approvers=roles))


def ship(service: str, version: str, canary_percent: int, idempotency_key: str) -> str:
    print(f"releasing {service} {version} to {canary_percent}% (key {idempotency_key})", file=sys.stderr)
    return f"{service} {version} released to {canary_percent}% of traffic"


two_release_managers = Gate(
    editable=["canary_percent"],
    message="Release to production?",
    approvers=ApproverRule(["release-managers"], quorum=2),
)


@elicitation.tool(gate=two_release_managers)
async def release(
    flow: Flow, service: str, version: str, canary_percent: Annotated[int, Field(ge=1, le=100)] = 10
) -> str:
    """Release a version of a service; two release managers approve it, and may lower the canary share first."""
    return await flow.step("ship", ship, service, version, canary_percent, flow.idempotency_key("ship"))


if __name__ == "__main__":
    uvicorn.run(auth.http_app(server, host="127.0.0.1"), host="127.0.0.1", port=PORT)
