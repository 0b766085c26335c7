"""URL mode: connect a third-party account in the browser, over HTTP with sign-in; the token stays here.

The tool sends the person to this server's own page, where they sign in (the local authorization server),
continue to the provider, sign in there and allow; the provider's token lands in this server's encrypted
vault and the tool uses it server-side. The chat only ever sees what the tool returns.

Run the stand-in provider and this server (a key: `python -c "import base64, secrets;
print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"`):

    python -m mcp_elicit.reference.provider --port 9100 --client-id example --client-secret s3cret \\
        --redirect-uri http://127.0.0.1:8000/elicit/callback --user "ada:lovelace:Ada Lovelace"
    export MCP_ELICIT_USERS="alice:wonderland:Alice Liddell" MCP_ELICIT_AUTH_KEYS=KEY MCP_ELICIT_STATE_KEYS=KEY2 \\
        MCP_ELICIT_VAULT_KEYS=v1:KEY3 MCP_ELICIT_PROVIDER_URL=http://127.0.0.1:9100 \\
        MCP_ELICIT_PROVIDER_CLIENT_ID=example MCP_ELICIT_PROVIDER_CLIENT_SECRET=s3cret
    python examples/connect_account.py
    mcp-elicit login http://127.0.0.1:8000/mcp     # signs in as alice, in your browser
    mcp-elicit call http://127.0.0.1:8000/mcp example_profile

`PORT` (8000) and `PUBLIC_URL` (`http://127.0.0.1:PORT`; behind TLS, `https://your.host`) say where it serves.
"""

import hashlib
import hmac
import os
from typing import Literal

import anyio.to_thread
import httpx2
import uvicorn

from mcp_elicit import Completed, Elicitation, Flow, RequestState
from mcp_elicit.settings import Settings
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, OAuthConnect, Vault, VaultKeyRing, WebPages, mount_web

PORT = int(os.environ.get("PORT", "8000"))
PUBLIC_URL = os.environ.get("PUBLIC_URL", f"http://127.0.0.1:{PORT}")
VAULT_NAME = "example"

settings = Settings.read()
if not (settings.state_keys and settings.auth_keys and settings.provider_url and settings.provider_client_id):
    raise SystemExit("set the variables this file's docstring lists (or their _FILE variants)")
if settings.provider_client_secret is None:
    raise SystemExit("set MCP_ELICIT_PROVIDER_CLIENT_SECRET (or MCP_ELICIT_PROVIDER_CLIENT_SECRET_FILE)")
provider = settings.provider_url
elicitation = Elicitation(
    settings.store, request_state=RequestState(keys=settings.state_keys), public_base_url=PUBLIC_URL
)
auth = LocalAuthorizationServer(PUBLIC_URL, LocalUsers.from_env(), elicitation.store, signing_keys=settings.auth_keys)
server = elicitation.server("profiles", **auth.mcp_server_kwargs(f"{PUBLIC_URL}/mcp"))
vault = Vault(elicitation.store, VaultKeyRing.from_env())
connect = OAuthConnect(
    vault_name=VAULT_NAME,
    provider_title="Example",
    authorize_url=f"{provider}/authorize",
    token_url=f"{provider}/token",
    client_id=settings.provider_client_id,
    client_secret=settings.provider_client_secret.get_secret_value(),
    scope="profile",
    profile_url=f"{provider}/api/me",
)
page_key = hmac.new(settings.auth_keys[0], b"example pages", hashlib.sha256).digest()
mount_web(server, elicitation, WebPages(sign_in=auth, page_key=page_key, vault=vault, flows={"connect": connect}))


@elicitation.tool()
async def example_profile(flow: Flow, field: Literal["name", "login"] = "name") -> str:
    """Read the person's Example profile, connecting their account first if it is not connected yet."""
    token = await anyio.to_thread.run_sync(vault.get, flow.principal, VAULT_NAME)
    if token is None:
        outcome = await flow.ask_url("Connect your Example account so that I can read your profile.", key="connect")
        if not isinstance(outcome, Completed):
            return f"not connected ({type(outcome).__name__.lower()})"
        token = await anyio.to_thread.run_sync(vault.get, flow.principal, VAULT_NAME)
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.get(f"{provider}/api/me", headers={"Authorization": f"Bearer {token}"})
    response.raise_for_status()
    profile = response.json()
    return f"{profile[field]} (Example account {profile['login']})"


if __name__ == "__main__":
    uvicorn.run(auth.http_app(server, host="127.0.0.1"), host="127.0.0.1", port=PORT)
