"""A client that cannot show forms: the person answers on the web page instead, found in their inbox.

The tool is declared with `Fallback.WEB`. A client without elicitation gets a tool error naming the
question's page ("answer at http://.../elicit/ID, then call this tool again"); the person signs in, finds
the question in `/inbox` among everything waiting for them, answers its form, and the same call made again
goes on with that answer. A client that can show forms is simply asked, as by any flow tool.

    export MCP_ELICIT_USERS="alice:wonderland:Alice Liddell" MCP_ELICIT_AUTH_KEYS=KEY MCP_ELICIT_STATE_KEYS=KEY2
    python examples/inbox_fallback.py             # then open http://127.0.0.1:8000/inbox
    mcp-elicit login http://127.0.0.1:8000/mcp
    mcp-elicit call http://127.0.0.1:8000/mcp order_supplies --arg item=toner < /dev/null   # no terminal: the page

(a key: `python -c "import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"`;
`PORT` and `PUBLIC_URL` as in `connect_account.py`.)
"""

import hashlib
import hmac
import os

import uvicorn
from pydantic import BaseModel, Field

from mcp_elicit import Accepted, Elicitation, Fallback, Flow, RequestState
from mcp_elicit.settings import Settings
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, WebPages, mount_web

PORT = int(os.environ.get("PORT", "8000"))
PUBLIC_URL = os.environ.get("PUBLIC_URL", f"http://127.0.0.1:{PORT}")


class Order(BaseModel):
    quantity: int = Field(ge=1, le=50, description="How many")
    urgent: bool = Field(default=False, description="Deliver tomorrow")


settings = Settings.read(only=["store", "state_keys", "auth_keys"])
if not (settings.state_keys and settings.auth_keys):
    raise SystemExit("set MCP_ELICIT_STATE_KEYS and MCP_ELICIT_AUTH_KEYS (or their _FILE variants)")
elicitation = Elicitation(
    settings.store, request_state=RequestState(keys=settings.state_keys), public_base_url=PUBLIC_URL
)
auth = LocalAuthorizationServer(PUBLIC_URL, LocalUsers.from_env(), elicitation.store, signing_keys=settings.auth_keys)
server = elicitation.server("supplies", **auth.mcp_server_kwargs(f"{PUBLIC_URL}/mcp"))
page_key = hmac.new(settings.auth_keys[0], b"example pages", hashlib.sha256).digest()
mount_web(server, elicitation, WebPages(sign_in=auth, page_key=page_key))  # the inbox is on by default


@elicitation.tool(asks=(Order,), fallback=Fallback.WEB)
async def order_supplies(flow: Flow, item: str) -> str:
    """Order office supplies once the person says how many."""
    order = await flow.ask(f"How many {item} should I order?", Order)
    if not isinstance(order, Accepted):
        return "nothing ordered"
    when = "tomorrow" if order.data.urgent else "next week"
    return f"ordered {order.data.quantity} x {item}, arriving {when}"


if __name__ == "__main__":
    uvicorn.run(auth.http_app(server, host="127.0.0.1"), host="127.0.0.1", port=PORT)
