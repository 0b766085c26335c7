"""Runs the terminal handler on one request given as JSON, in a real terminal, and prints the reply.

The pseudo-terminal tests spawn this file: `python terminal_driver.py form|url REQUEST_JSON`, where the
request is `{"asker": {Asker fields}, "message": ..., "schema": {...}, "problem": ...}` (problem optional)
for a form and `{"asker": ..., "message": ..., "url": ...}` for a URL. The last line printed is
`REPLY <json>`: the reply as the kit would send it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp_elicit.client import review_url
from mcp_elicit.client.handler import Accept, Asker, Consent, Decline, FormRequest, UrlRequest
from mcp_elicit.client.terminal import TerminalHandler


def reply_json(reply: object) -> dict[str, Any]:
    if isinstance(reply, Accept):
        return {"action": "accept", "content": dict(reply.content)}
    if isinstance(reply, Consent):
        return {"action": "accept"}
    if isinstance(reply, Decline):
        return {"action": "decline"}
    return {"action": "cancel"}


async def main(kind: str, request: dict[str, Any]) -> None:
    handler = TerminalHandler()
    asker = Asker(**request["asker"])
    if kind == "form":
        form = FormRequest(asker, request["message"], request["schema"], problem=request.get("problem"))
        reply: object = await handler.form(form)
    else:
        reply = await handler.url(UrlRequest(asker, request["message"], review_url(request["url"])))
    print("REPLY " + json.dumps(reply_json(reply), sort_keys=True), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
