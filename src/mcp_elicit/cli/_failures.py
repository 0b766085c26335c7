"""Why a client command failed, in one line a person can act on, and the exit code that goes with it.

The SDK and anyio report a refused connection as an exception group two task groups deep, a server that
died during the handshake as "Connection closed", an unauthenticated endpoint as an HTTP status error.
None of that tells a person what to do; `describe` finds the error that matters and says it plainly, with
the server's own words where it gave any (an HTTP error status comes with a JSON-RPC error, a bearer
challenge's `error_description` or a line of text, which the SDK reports as a generic error). A tool
that asks with a server-initiated request (the SDK's `ctx.elicit`) fails on a 2026-07-28 connection with a
message about a missing back-channel: `era_hint` reads that as what it means, and names the era that works.
Exit codes follow the CLI's rule: 2 when the command could not do its job at all (usage, connection),
1 when the call ran and did not succeed (a tool error, a refused or stopped call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import httpx2
from mcp.client.auth.utils import extract_field_from_www_auth
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_elicit.client import ConnectionLost, KitError, ServerSilent, UnsupportedEra
from mcp_elicit.printable import printable

USAGE = 2
"""Bad arguments, or no server to talk to."""
CALL_FAILED = 1
"""The call was made and did not succeed."""
PINNABLE_ERAS = ("2025-11-25", "2026-07-28")
"""The eras `--era` can pin, newest last."""
HANDSHAKE_ERA = "2025-11-25"
_NO_BACK_CHANNEL = re.compile(r"back-channel|server-initiated request", re.IGNORECASE)
"""How servers say a tool asked on a live call that 2026-07-28 does not have: the SDK's `NoBackChannelError`
("... no back-channel for server-initiated requests"), FastMCP's "elicitation via server-initiated requests
is unavailable on 2026-07-28 connections"."""
SAID_LENGTH = 300
"""Characters of a server's words on an HTTP error shown; a longer text is cut."""


class CommandFailed(Exception):
    """A failure already put into words, with its exit code."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True, slots=True)
class HttpRefusal:
    """An HTTP error status an endpoint answered, and what the server said with it."""

    status: int
    said: str | None = None
    """The server's words, made printable: a JSON-RPC error's message, else the bearer challenge's
    `error_description`, else the first line of a plain-text body."""
    jsonrpc: bool = False
    """The body was a JSON-RPC error, which the SDK raised as the call's `MCPError` with its code."""


async def http_refusal(response: httpx2.Response) -> HttpRefusal:
    """What an HTTP error answer says. Its body is read only when it is JSON or plain text (a bare Starlette
    `Response("Invalid Content-Type header", 400)` names no type): an error's words, small by nature."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    body: object = None
    if kind == "application/json" or kind.endswith("+json"):
        try:
            body = json.loads(await response.aread())
        except (ValueError, httpx2.HTTPError):
            body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(message := error.get("message"), str):
        return HttpRefusal(response.status_code, _said(message), jsonrpc=True)
    described = extract_field_from_www_auth(response, "error_description")
    if described is None and kind in ("", "text/plain"):
        try:
            described = (await response.aread()).decode(errors="replace").strip().split("\n")[0]
        except httpx2.HTTPError:
            described = None
    if not described or described.strip().lower() == response.reason_phrase.lower():
        return HttpRefusal(response.status_code)  # a bare "Not Found" says no more than the status
    return HttpRefusal(response.status_code, _said(described))


def _said(text: str) -> str:
    one_line = " ".join(text.split())
    if len(one_line) > SAID_LENGTH:
        one_line = one_line[: SAID_LENGTH - 1].rstrip() + "…"
    return printable(one_line)


@dataclass(frozen=True, slots=True)
class Situation:
    """What was being done when it failed, to name it in the message."""

    target: str
    connected: bool
    server_last_words: str | None = None
    """The last line a stdio server wrote to stderr, if it wrote anything."""
    http_refusal: HttpRefusal | None = None
    """The last HTTP error status the endpoint answered: the SDK reports one without a JSON-RPC error body
    only as a generic JSON-RPC error."""
    token_given: bool = False
    protocol: str | None = None
    """The protocol version of the connection, once there is one."""


def era_hint(said: str, protocol: str | None) -> str | None:
    """What a server's failure text means when its tool asked with a request the connection's era lacks."""
    if protocol not in MODERN_PROTOCOL_VERSIONS or not _NO_BACK_CHANNEL.search(said):
        return None
    return (
        f"the tool asks with a server-initiated request, which protocol {protocol} does not have; "
        f"call it with --era {HANDSHAKE_ERA} (the server said: {said.strip()})"
    )


def leaves(error: BaseException) -> list[BaseException]:
    """The errors inside (nested) exception groups, in order; the error itself if it is no group."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def describe(error: BaseException, situation: Situation) -> CommandFailed:
    """The first leaf that explains the failure, as a message and an exit code."""
    found = leaves(error)
    for leaf in found:
        if isinstance(leaf, CommandFailed):
            return leaf
    refusal = situation.http_refusal
    if (
        refusal is not None
        and (not refusal.jsonrpc or refusal.status in (401, 403))  # a JSON-RPC error's code says more, bar sign-in
        and any(isinstance(leaf, MCPError) for leaf in found)
    ):
        return _http_status(refusal.status, situation)
    for leaf in found:
        explained = _explain(leaf, situation)
        if explained is not None:
            return explained
    first = found[0]
    doing = "calling" if situation.connected else "connecting to"
    return CommandFailed(f"{doing} {situation.target} failed: {type(first).__name__}: {first}", USAGE)


def _explain(error: BaseException, situation: Situation) -> CommandFailed | None:
    target = situation.target
    if isinstance(error, httpx2.HTTPStatusError):
        return _http_status(error.response.status_code, situation)
    if isinstance(error, httpx2.ConnectError):
        return CommandFailed(f"cannot reach {target}: nothing answers there ({error})")
    if isinstance(error, httpx2.TimeoutException):
        return CommandFailed(f"{target} did not answer in time")
    if isinstance(error, httpx2.HTTPError):
        return CommandFailed(f"talking to {target} failed: {type(error).__name__}: {error}")
    if isinstance(error, ServerSilent):
        return CommandFailed(f"{target}: {error}")
    if isinstance(error, UnsupportedEra):
        return CommandFailed(f"{target} does not speak protocol {error.wanted}; {_offers(error.offered)}")
    if isinstance(error, ConnectionLost) or (isinstance(error, MCPError) and error.code == CONNECTION_CLOSED):
        said = f"; its last words: {situation.server_last_words}" if situation.server_last_words else ""
        when = "during the call" if situation.connected else "before answering"
        return CommandFailed(f"{target} closed the connection {when}{said}")
    if isinstance(error, MCPError) and (hint := era_hint(error.error.message, situation.protocol)) is not None:
        return CommandFailed(hint, CALL_FAILED)
    if isinstance(error, KitError):
        return CommandFailed(f"the call stopped: {error}", CALL_FAILED)
    if isinstance(error, MCPError) and situation.connected:
        return CommandFailed(f"the server refused the call: {error.error.message} (code {error.code})", CALL_FAILED)
    if isinstance(error, MCPError) and error.code == METHOD_NOT_FOUND:
        return CommandFailed(f"no MCP endpoint at {target} ({error.error.message})")
    if isinstance(error, MCPError):
        return CommandFailed(f"{target} refused the connection: {error.error.message} (code {error.code})")
    if isinstance(error, PermissionError):
        return CommandFailed(f"cannot run {target}: permission denied")
    if isinstance(error, FileNotFoundError):
        return CommandFailed(f"command not found: {target}")
    return None


def _offers(offered: Sequence[str]) -> str:
    if not offered:
        return "it names no revision it speaks"
    pinnable = [era for era in PINNABLE_ERAS if era in offered]
    use = f"--era {pinnable[-1]}" if pinnable else "--era auto (negotiated)"
    return f"it offers {', '.join(offered)}: use {use}"


def _http_status(status: int, situation: Situation) -> CommandFailed:
    """The status explained, with the server's words beside it (`HTTP 401: the token expired`)."""
    target = situation.target
    refusal = situation.http_refusal
    said = refusal.said if refusal is not None and refusal.status == status else None
    http = f"HTTP {status}: {said}" if said else f"HTTP {status}"
    if status == 401 and situation.token_given:
        return CommandFailed(
            f"{target} refused the token ({http}): it is invalid or has expired; sign in again with "
            f"mcp-elicit login {target}, or pass --token"
        )
    if status == 401:
        return CommandFailed(
            f"{target} requires authorization ({http}): sign in with mcp-elicit login {target}, or pass --token"
        )
    if status == 403:
        return CommandFailed(f"{target} refused this token ({http}): it lacks a scope the server needs")
    if status == 404:
        return CommandFailed(f"no MCP endpoint at {target} ({http})")
    return CommandFailed(f"{target} answered {http}")
