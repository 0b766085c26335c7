"""Connect first: a person's call of an upstream with a credential they have not connected yet.

Why through the runtime: connecting is a URL-mode question like any other (its page runs `ApiKeyEntry` or
`OAuthConnect`, which keeps the secret in the vault), so it is a durable decision bound to the caller, asked the way
the client's era asks (a live URL elicitation for a 2025 client, a round for a 2026-07-28 one, the page named in a
tool error for a client that cannot be sent to a URL), and listed, audited and expired like the rest. It is the
decision of an operation of its own, of the upstream's `connect` tool (`mcp_elicit.gateway.credentials`), so that the
call that needed it, once connected, goes on as any call does (its gate, its questions, its own operation), never
replayed from the connection's result. That operation's arguments name the credential it replaces (when it was
stored; none: the first), so that identical calls of a person who has not connected share one question, and
connecting again is a new operation rather than the replay of the last one's result. A round of that operation
carries its state under `CONNECT_STATE` and those arguments, which tells its retry from the rounds of the call
itself and lets the retry name the same operation.

The check costs no store read while the person has a session with the upstream up (their secret was read as it
connected) and the vault was looked at for them within `RECHECK` seconds; otherwise it reads the vault's row once
(without opening it). That look is how a credential replaced on another instance of the gateway, which this one does
not hear of, reaches the sessions here: from the first call after it, or at once if the upstream refuses the old one
(its refusal marks it refused, and the next call reads the vault).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Final, cast
from urllib.parse import quote, unquote

import anyio
from mcp.server.context import ServerRequestContext
from mcp_types import CallToolRequestParams, CallToolResult, InputRequiredResult, RequestParamsMeta, TextContent

from mcp_elicit.gateway.credentials import CONNECT_TOOL, connect_key, vault_name
from mcp_elicit.gateway.routing import prefixed
from mcp_elicit.gateway.upstream import Pool, Secret, Secrets
from mcp_elicit.model import Principal
from mcp_elicit.server.answers import Completed
from mcp_elicit.server.fallback import Fallback
from mcp_elicit.server.flow import Flow
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY, Elicitation
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.web.vault import Vault, VaultError

log = logging.getLogger(__name__)

CONNECT_STATE: Final = "connect:"
"""What the `requestState` of a connect round starts with: then the credential it replaces (percent-encoded; or
nothing), `:`, and the runtime's sealed state."""
RECHECK: Final = 30.0
"""Seconds a person's session up with an upstream is taken to carry their latest credential without a look at the
vault: a row read per person and upstream at most that often, for a replacement made on another instance."""
_READER = "gateway"
"""The client named when the gateway reads a person's vault entry (entries are per person, whatever the client)."""


class Connecting:
    """The people's credentials of the gateway's upstreams: read from the vault, and connected through URL mode."""

    def __init__(self, elicitation: Elicitation, vault: Vault, announce: Callable[[], Awaitable[None]]) -> None:
        self.elicitation = elicitation
        self._vault = vault
        self._store = AsyncStore(elicitation.store)
        self._announce = announce
        """Tells the clients that the tools changed: a person who connects sees the upstream's tools from then on."""
        self.recheck = RECHECK
        """Seconds between two looks at the vault for a person whose session is up (`RECHECK`)."""
        self._checked: dict[tuple[str, str], float] = {}
        """When the vault was last looked at for a person's credential of an upstream, by (upstream, principal)."""

    def secrets(self, upstream: str) -> Secrets:
        """Where the lanes of `upstream` read their owner's credential. One that cannot be opened (a key ring without
        its key, a tampered row; the vault logs why) comes without its value: the lane counts it as refused, and the
        person is asked to connect again, which replaces it."""

        async def secret(principal: str) -> Secret | None:
            version = await self._version(principal, upstream)
            try:
                value = await self._store.call_blocking(
                    self._vault.get, Principal(principal, _READER), vault_name(upstream)
                )
            except VaultError:
                return None if version is None else Secret(None, version)
            return None if value is None or version is None else Secret(value, version)

        return secret

    async def connected(self, pool: Pool, principal: str) -> bool:
        """Whether `principal` connected the pool's upstream: a session of theirs is up, or the vault has a credential
        of theirs that the upstream did not refuse. A credential stored since their sessions connected (one of them
        refused, or they were connecting again, or it was replaced on another instance) is carried from now on: those
        sessions are closed."""
        looked = (pool.upstream.name, principal)
        now = anyio.current_time()
        if pool.carries(principal) and now - self._checked.get(looked, -math.inf) < self.recheck:
            return True
        version = await self._version(principal, pool.upstream.name)
        self._checked[looked] = now
        lanes = pool.owned(principal)
        refused = pool.refusals.get(principal)
        if version is None or refused == version or any(lane.refused == version for lane in lanes):
            return False
        if refused is not None or any(
            lane.version not in (None, version) or lane.refused is not None for lane in lanes
        ):
            pool.refusals.pop(principal, None)
            pool.renew(principal)
        return True

    async def _version(self, principal: str, upstream: str) -> str | None:
        """When `principal`'s credential of `upstream` was stored (None: it is not), read without opening it."""
        stored = await self._store.vault_get(principal, vault_name(upstream))
        return None if stored is None else stored.updated_at.isoformat()

    @staticmethod
    def tool(pool: Pool) -> dict[str, Any]:
        """The upstream's `connect` tool, as listed (before the upstream's own tools, under its prefix)."""
        credential = pool.upstream.credential
        assert credential is not None
        doing = credential.doing(pool.upstream.name)
        return {
            "name": CONNECT_TOOL,
            "description": (
                f"Connect {doing} to this gateway, on its page in the browser, so that the tools of "
                f"{pool.upstream.name!r} act as you; call it again to replace it. The assistant never sees it."
            ),
            "inputSchema": {"type": "object", "properties": {}},
        }

    async def connect(
        self, ctx: ServerRequestContext[Any, Any], pool: Pool, principal: str, params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        """Ask `principal` to connect the pool's upstream, for their call `params` (the retry of a connect round
        when its state says so); the result says it is connected, or why not (a tool error, which names the page
        for a client that cannot be sent to it), or is a connect round."""
        upstream = pool.upstream
        tool = params.name
        given = params.request_state
        if given is not None and given.startswith(CONNECT_STATE):
            quoted, _, state = given.removeprefix(CONNECT_STATE).partition(":")
            replacing = unquote(quoted)
        else:
            replacing, state = await self._version(principal, upstream.name) or "", ""
        if replacing:
            pool.suspect(principal)
        credential = upstream.credential
        assert credential is not None
        doing = credential.doing(upstream.name)
        own = prefixed(upstream.prefix, CONNECT_TOOL)
        message = (
            f"Connect {doing} to the gateway."
            if tool == own
            else f"{tool} needs {doing}: connect it to the gateway first."
        ) + " It stays on the gateway: the assistant and its app never see it."
        connecting = CallToolRequestParams(
            name=own,
            arguments={"replacing": replacing} if replacing else {},
            request_state=state or None,
            input_responses=params.input_responses if state else None,
        )

        async def body(flow: Flow) -> CallToolResult:
            outcome = await flow.ask_url(message, key=connect_key(upstream.name))
            if isinstance(outcome, Completed):
                pool.renew(flow.principal.principal_id)
                await self._announce()
                said = f"Connected {doing}: the tools of {upstream.name!r} act as you."
                return CallToolResult(content=[TextContent(type="text", text=said)])
            why = type(outcome).__name__.lower()
            said = f"{doing[0].upper()}{doing[1:]} is not connected ({why})"
            said += "." if tool == own else f": {tool} was not called."
            return CallToolResult(content=[TextContent(type="text", text=said)], is_error=True)

        # The call's idempotency key names the call, which goes on once connected: not the connection's operation.
        meta = cast(
            RequestParamsMeta, {key: value for key, value in (ctx.meta or {}).items() if key != IDEMPOTENCY_META_KEY}
        )
        outcome = await self.elicitation.run_tool(replace(ctx, meta=meta), connecting, body, fallback=Fallback.WEB)
        if isinstance(outcome, InputRequiredResult):
            said = f"{CONNECT_STATE}{quote(replacing, safe='')}:{outcome.request_state or ''}"
            return outcome.model_copy(update={"request_state": said})
        return outcome
