"""The upstream server as the gateway holds it: sessions (lanes) made of the SDK's own `Client`, each kept
connected by a supervisor, and the rules that say which lane a call may travel on.

Why lanes: the SDK's `ClientSession` hands an upstream's `elicitation/create` (or log message) to a callback
with nothing that ties it to the request it belongs to, and on stdio the wire carries nothing that could. So a
lane carries calls for one downstream connection at a time (its holder): whatever the upstream asks or logs on
that lane belongs to that connection. Which of its calls a question belongs to cannot be told when it has
several in flight on the lane: the question is then asked on none of them, and stops the clock of all. Calls
from clients that cannot be asked anything on the live call (2026-07-28, or HTTP without a back channel) share
one holder: they all get the same answer, a refusal. Requests that never draw a question (lists, completion,
`logging/setLevel`) ride any lane that is up. A 2026-07-28 session carries no requests from the upstream at all
(it asks in its results), so it has no holder: calls of every client share it.

A lane also carries the calls of one principal at a time (the signed-in user a call runs for, when the gateway
knows one), whether they draw questions or not: two principals' requests are never in flight on one upstream
session, so nothing the upstream keeps per session while a call runs, or says on it, reaches another person.
Behind a signed-in gateway a handshake session is one principal's for its whole life (its `owner`), too: what
the upstream keeps per session between calls (the roots it was told, anything a server stores per MCP session)
never passes from one person to the next (the log level is the gateway's one, sent to every session). The lanes
of an upstream with a credential (`mcp_elicit.gateway.credentials`) are opened for their owner, each connection
carrying that principal's secret, read from the vault as it connects; none is opened at start (no one's secret is
known then), and a principal's first call opens theirs. Those of an upstream without one are taken by the first
principal whose call they carry: the first lane, opened at start for what needs no principal (the capabilities,
the lists that bind the gates, list changes), until then; the gateway's own listings on it (`tells_changes`) are
its, not its owner's calls. At the upstream's session limit an idle lane of another principal is closed to make
room. A 2026-07-28 session keeps passing from one principal to the next (one at a time): the upstream keeps
nothing between its requests, each of which carries all it needs (its log level, its client's capabilities), so
there is no state to cross.
Behind a gateway without sign-in (no principal), sessions are shared as the rest of this says.

Why a supervisor: an upstream process that exits, or an HTTP upstream that goes away, must not take the
gateway with it. The supervisor notices the end of the connection (the read side of the transport ending, or
the transport failing; never an error code in an answer, since `-32000` is also a common code of servers' own
errors), says so in the log, and connects again after a backoff (0.25 s, doubling up to 30 s, back to the start
once a connection stayed up longer than that). An HTTP upstream that answers 404 to the session no longer knows
it (it restarted): the lane connects again, and the call it refused is sent once more, on the new session. A
lane that lost its connection is "restarting" and calls wait for it; one whose last attempt to connect failed
is "down" and calls fail at once, naming the reason, until the next attempt.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import re
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Hashable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from secrets import token_hex
from types import TracebackType
from typing import Any, Final, Literal, Protocol, Self

import anyio
import anyio.abc
import httpx2
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client
from mcp.client.subscriptions import ServerEvent, SubscriptionLost, ToolsListChanged
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    Implementation,
    JSONRPCError,
    ListRootsRequest,
    ListRootsResult,
    LoggingMessageNotificationParams,
    PaginatedRequestParams,
    ServerCapabilities,
    ServerNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_elicit.gateway.credentials import CONNECT_TOOL, Credential
from mcp_elicit.settings import SECRETS, variable

log = logging.getLogger(__name__)

UpstreamEra = Literal["auto", "legacy", "2026-07-28"]
ERAS: tuple[UpstreamEra, ...] = ("auto", "legacy", "2026-07-28")
DEFAULT_TIMEOUT = 60.0
HTTP_SESSIONS = 8
"""Sessions with an HTTP upstream at most, unless told: clients take turns on a session while one of them may be
asked a question, so a few sessions keep one person's slow answer from holding up the others."""
FIRST_BACKOFF = 0.25
LAST_BACKOFF = 30.0
ENDED = "the connection ended (the upstream exited or hung up)"
_SESSION_TERMINATED = (INVALID_REQUEST, "Session terminated")
"""The error the SDK's client makes up for a 404 to a request of a session whose body is no JSON-RPC error."""
_REFUSAL = "mcp_elicit_refusal"
"""The key, in the data of the error the gateway puts in place of a 401 or 403 to a request, of its token."""
FORGOTTEN = "the upstream no longer knows the session (it answered HTTP 404: it restarted, or ended the session)"
GATEWAY_VARIABLES = "MCP_ELICIT_"
"""What the names of the gateway's own settings start with: no upstream process inherits them (`inherited`) but those
its `pass_env` names."""
HELD_SECRETS: Final = frozenset(variable(name) + tail for name in SECRETS for tail in ("", "_FILE"))
"""The gateway's settings that hold a secret (the vault's keys, the sign-in keys, the identity provider's client
secret...), or name the file holding one: passed to no upstream, whatever its `pass_env` says."""
NO_BACK_CHANNEL = "no-back-channel"
"""The one holder of every call whose client cannot be asked on the live call: what the upstream asks them
gets one answer (a refusal) whichever of them it belongs to."""


class UpstreamUnavailable(Exception):
    """The upstream could not be reached when the gateway started; the message says why."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the upstream server is and how to talk to it.

    Exactly one of `command` (a stdio server's argv, started with the gateway's environment but its own settings
    and secrets, as `inherited` says) and `url` (a streamable HTTP endpoint).
    """

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    era: UpstreamEra = "auto"
    """`auto`: the `initialize` handshake first, `server/discover` if the upstream refuses it. A dual-era server
    built on the SDKs asks with `elicitation/create` (the SDK's `ctx.elicit`) on a handshake session only: on a
    2026-07-28 session its tools' questions fail. The gateway bridges a handshake upstream's questions for
    2026-07-28 clients. `2026-07-28` pins discovery, for an upstream that asks in its results (`InputRequiredResult`):
    such a session is stateless, so a 2026-07-28 client gets the rounds as they are, no upstream request waits in the
    gateway's memory for a person, and calls of every client share one session."""
    timeout: float | None = DEFAULT_TIMEOUT
    """Seconds a request may go without an answer or progress before it is abandoned (`None`: never). A
    question relayed to the person stops the clock."""
    sessions: int | None = None
    """Lanes at most, each a session of its own (a process of its own on stdio); by default (`None`)
    `HTTP_SESSIONS` for an HTTP upstream and 1 for a command, where one process often means one state that more
    processes would split."""
    env: Mapping[str, str] | None = None
    """Variables a stdio upstream gets on top of what it inherits of the gateway's environment (`inherited`: all but
    the gateway's own settings and secrets), given as they are (an `MCP_ELICIT_*` one too, for an upstream built on
    mcp-elicit): without the rest of it, `PATH` among them, most commands would not start."""
    pass_env: tuple[str, ...] = ()
    """Variables of the gateway's environment a stdio upstream inherits despite their `MCP_ELICIT_` names (an upstream
    that is itself `mcp-elicit serve`, given the gateway's `MCP_ELICIT_STORE`); never one of `HELD_SECRETS` nor an
    OAuth client secret (`inherited`)."""
    cwd: str | None = None
    """The directory a stdio upstream starts in (default: the gateway's)."""
    prefix: str | None = None
    """What its tool and prompt names and resource URIs carry behind a gateway of several upstreams
    (`mcp_elicit.gateway.routing`); `None` for the one upstream of a gateway, relayed as it is."""
    credential: Credential | None = None
    """What each person connects before their calls reach it, sent with their sessions only
    (`mcp_elicit.gateway.credentials`); `None`: every call reaches it as the gateway."""

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError("an upstream is either a command or a URL")
        if self.credential is not None:
            problem = self.credential.carried(command=self.url is None)
            if problem is not None:
                raise ValueError(f"upstream {self.name!r}: credential.{problem}")
        if self.pass_env and self.url is not None:
            raise ValueError(f"upstream {self.name!r}: pass_env is for a command; one given by url is not started here")
        held = sorted(HELD_SECRETS.intersection(name.upper() for name in self.pass_env))
        if held:
            raise ValueError(
                f"upstream {self.name!r}: pass_env names {', '.join(held)}, holding the gateway's secrets, which no "
                "upstream is given"
            )
        if self.era not in ERAS:
            raise ValueError(f"era must be one of {', '.join(ERAS)}, not {self.era!r}")
        if self.sessions is not None and self.sessions < 1:
            raise ValueError(f"sessions must be at least 1, not {self.sessions}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout}")

    @property
    def session_limit(self) -> int:
        if self.sessions is not None:
            return self.sessions
        return HTTP_SESSIONS if self.url is not None else 1

    @classmethod
    def parse(
        cls,
        target: str,
        *,
        name: str | None = None,
        era: UpstreamEra = "auto",
        timeout: float | None = DEFAULT_TIMEOUT,
        sessions: int | None = None,
    ) -> Upstream:
        """An http(s) URL, or a command line split as a POSIX shell splits it; named by what was given."""
        text = target.strip()
        if text.startswith(("http://", "https://")):
            return cls(name or text, url=text, era=era, timeout=timeout, sessions=sessions)
        if "://" in text.split(" ", 1)[0]:
            raise ValueError(f"{target!r}: an upstream URL is http:// or https://")
        try:
            argv = tuple(shlex.split(text))
        except ValueError as error:
            raise ValueError(f"{target!r} is not a command line: {error}") from None
        if not argv:
            raise ValueError("the upstream command is empty")
        return cls(name or shlex.join(argv), command=argv, era=era, timeout=timeout, sessions=sessions)


class Deadline:
    """A request's timeout as a budget of idle seconds: progress from the upstream renews it, and a question
    relayed to the person pauses it (the person is not the upstream hanging). One deadline watches each wait
    of a request in turn: for a lane, then for the answer."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self._at = math.inf if timeout is None else anyio.current_time() + timeout
        self._pauses = 0
        self._scope: anyio.CancelScope | None = None

    @contextmanager
    def watching(self) -> Iterator[anyio.CancelScope]:
        """A scope cancelled when the budget runs out; `cancelled_caught` says it did."""
        scope = anyio.CancelScope(deadline=math.inf if self._pauses else self._at)
        self._scope = scope
        try:
            with scope:
                yield scope
        finally:
            self._scope = None

    def renew(self) -> None:
        if self.timeout is not None and not self._pauses:
            self._at = anyio.current_time() + self.timeout
            if self._scope is not None:
                self._scope.deadline = self._at

    @contextmanager
    def paused(self) -> Iterator[None]:
        self._pauses += 1
        if self._scope is not None:
            self._scope.deadline = math.inf
        try:
            yield
        finally:
            self._pauses -= 1
            self.renew()


@dataclass(eq=False)
class Call:
    """A downstream request while it is relayed: what to name it by, whose it is, and its clock."""

    ctx: ServerRequestContext[Any, Any]
    what: str
    """`tools/call 'echo'`: how errors and logs name it."""
    holder: Hashable | None
    """The downstream connection the upstream's questions on this call go to; `None` for a request that draws
    none, which may share any lane."""
    deadline: Deadline
    asked: Callable[[Lane, ElicitRequestParams], Awaitable[ElicitResult | ErrorData]] | None = None
    """Where the upstream's questions on this call go when the gateway keeps them durable (its own operation),
    instead of to the client on the live call."""
    pool: Pool | None = None
    """The upstream it goes to, behind a gateway of several (else the one)."""
    sent: bool = False
    """The request left for the upstream (its last attempt): from then on, its outcome is the upstream's (unless
    the upstream refused it unseen, having lost the session: then it is `False` again)."""
    once: bool = False
    """The call is a step that runs at most once (a gated forward): never sent again, even when the upstream
    refused it unseen."""
    principal: str | None = None
    """The id of the principal the call runs for; `None` where the gateway binds no lanes to principals."""
    lane: Lane | None = None
    """The lane the call is on, while it is (`Pool.carrying`)."""
    claimed: bool = False
    """Whether its lane was claimed for its holder."""
    rides: int = 0
    """The blocks of `Pool.carrying` it is on its lane in: the lane is let go when the last one ends."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP upstream's 401 or 403 to a JSON-RPC request, which it did not run."""

    status: int
    scope: str | None = None
    """For a 403 with `insufficient_scope` (the credential is taken, but not for this request: the MCP specification's
    step-up answer), the scope its challenge names (empty if none): else None (the credential is not taken)."""


@dataclass(eq=False)
class Connection:
    """One connection of a lane, and what its transport said of it."""

    client: Client
    ended: str | None = None
    """Why it is over, once the transport said so (its read side ended, or the client was torn down) or the
    gateway gave it up; a call that fails on it then failed with it, not with an answer of the upstream."""
    forgotten: bool = False
    """The HTTP upstream answered 404 to a request of this session without a JSON-RPC answer of its own to that
    request: it restarted or ended the session, and ran none of the requests it answered so."""
    unknown: set[tuple[int, str]] = field(default_factory=set)
    """The errors (code, message) that the client turned those 404s into: the SDK's own when the body was not
    a JSON-RPC error, else the one the body said (the SDK's server says `Session not found` with no request id)."""
    refused: int | None = None
    """The HTTP status (401, 403) with which the HTTP upstream refused a JSON-RPC request of this connection: it does
    not take the credential the connection carries (an expired token, a revoked key), and ran none of those
    requests."""
    denials: dict[str, Refusal] = field(default_factory=dict)
    """Each refusal (401, 403) of a JSON-RPC request of this connection, by the token that the error the client made
    of it carries (`_UpstreamHttp`): an error is a refusal of its own request only if it carries one of them, never by
    its code and message, which the client gives any HTTP error (a proxy's 502 too)."""

    def forget(self, said: ErrorData | None) -> None:
        self.forgotten = True
        self.unknown.add(_SESSION_TERMINATED if said is None else (said.code, said.message))

    def unseen(self, error: MCPError) -> bool:
        """Whether `error` is a request's own session-unknown 404 (the upstream never saw it), rather than an
        answer of the upstream's, even if another request of the session was refused so meanwhile."""
        return self.forgotten and (error.code, error.error.message) in self.unknown

    def refuse(self, refusal: Refusal) -> str:
        """A request of this connection was refused so: the token its error carries."""
        if refusal.scope is None:
            self.refused = refusal.status
        token = token_hex(16)
        self.denials[token] = refusal
        return token

    def denied(self, error: MCPError) -> Refusal | None:
        """The refusal (401, 403) of `error`'s own request (the upstream ran nothing), or None: an answer of the
        upstream's, or another failure (which may follow another request's refusal)."""
        data = error.error.data
        token = data.get(_REFUSAL) if isinstance(data, dict) else None
        return self.denials.get(token) if isinstance(token, str) else None


class Relay(Protocol):
    """What a lane hands on to the downstream side: the upstream's questions, logs and notifications."""

    async def connected(self, lane: Lane, client: Client) -> None: ...

    async def elicit(self, lane: Lane, params: ElicitRequestParams) -> ElicitResult | ErrorData: ...

    async def ask_client(
        self, lane: Lane, request: CreateMessageRequest | ListRootsRequest
    ) -> CreateMessageResult | CreateMessageResultWithTools | ListRootsResult | ErrorData: ...

    async def logged(self, lane: Lane, params: LoggingMessageNotificationParams) -> None: ...

    async def notified(self, lane: Lane, notification: ServerNotification) -> None: ...

    async def event(self, event: ServerEvent) -> None: ...


Status = Literal["starting", "up", "restarting", "down", "stopped"]


@dataclass(frozen=True, slots=True)
class Secret:
    """A person's credential of an upstream, as a lane connects with it."""

    value: str | None = field(repr=False)
    """None: one is stored, but the vault cannot open it (a key ring without its key, a tampered row)."""
    version: str
    """Which of their credentials it is (when it was stored): a refused one is told from the next."""


Secrets = Callable[[str], Awaitable[Secret | None]]
"""A principal's credential of an upstream (from the vault), or None when they have not connected it."""


@dataclass(eq=False)
class Lane:
    """One session with the upstream, its supervisor, and the calls it carries."""

    pool: Pool
    number: int
    connection: Connection | None = None
    status: Status = "starting"
    problem: str = ""
    """Why the lane is not up: the last connection's end, or the last attempt's failure."""
    retry_at: float = 0.0
    calls: list[Call] = field(default_factory=list)
    holder: Hashable | None = None
    claims: int = 0
    """Calls of `holder` on the lane or waiting for it to come up."""
    principal: str | None = None
    occupants: int = 0
    """Calls of `principal` on the lane or waiting for it to come up."""
    owner: str | None = None
    """The only principal whose calls the lane carries, for its whole life: whose credential its connections carry
    (an upstream with a credential), or the first it carried (a handshake session behind a signed-in gateway);
    `None` while it is no one's (`Pool.personal`)."""
    retired: bool = False
    """It takes no more calls, and is closed once those on it ended (its owner connected a new credential)."""
    version: str | None = None
    """The version of its owner's credential its connection carries."""
    refused: str | None = None
    """The version of its owner's credential that the upstream refused (HTTP 401 or 403) as it connected or on a
    request of its session (`denied`), or that could not be sent (`Credential.unfit`): they are asked to connect
    again."""
    suspect: bool = False
    """Its owner may be replacing their credential (on the page, where the gateway does not see it done): whether
    the vault still has the one it carries is looked at before each of their calls."""
    _settled: anyio.Event = field(default_factory=anyio.Event)
    _lost: anyio.Event = field(default_factory=anyio.Event)
    _scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def label(self) -> str:
        name = repr(self.pool.upstream.name)
        return name if len(self.pool.lanes) <= 1 else f"{name} (session {self.number + 1})"

    @property
    def client(self) -> Client | None:
        return self.connection.client if self.connection is not None else None

    spoke: str | None = None
    """The protocol version of its last connection, kept while it connects again."""

    @property
    def era(self) -> str | None:
        return self.client.protocol_version if self.client is not None else self.spoke

    @property
    def modern(self) -> bool:
        """A 2026-07-28 session: it carries no requests from the upstream, so it needs no holder, and calls of any
        client share it."""
        return self.era in MODERN_PROTOCOL_VERSIONS

    def asking(self) -> list[Call]:
        """The calls the upstream's next question (or log message) may belong to: those in flight that can be asked
        or logged to (on a handshake session, the holder's). Nothing the upstream sends says which of them it is."""
        return [call for call in self.calls if call.holder is not None]

    def lost(self, connection: Connection, why: str) -> None:
        """`connection` is over: if it is the lane's, calls from now on wait for the next, which the supervisor
        makes."""
        if connection.ended is None:
            connection.ended = why
        if connection is not self.connection:
            return
        if self.status == "up":
            self.status, self.problem = "restarting", why
            self._unsettle()
        self._lost.set()

    async def supervise(self) -> None:
        """Connect, wait for the connection to end, connect again after a backoff; forever, until cancelled.

        Started in the pool's task group, never in a caller's scope: a call cancelled while the lane starts
        cannot end it. A lane whose supervisor ended anyway is stopped and leaves the pool, so that no call
        waits on it.
        """
        try:
            with self._scope:
                await self._supervise()
        except Exception:
            log.exception("upstream %s: its supervisor failed; the session is given up", self.label)
        finally:
            self.stop()
            if self in self.pool.lanes:
                self.pool.lanes.remove(self)

    @property
    def idle(self) -> bool:
        """No call is on it, nor waiting for it."""
        return not self.calls and not self.claims and not self.occupants

    def close(self) -> None:
        """Leave the pool now and end the connection (its supervisor is cancelled): for an idle lane."""
        self.retired = True
        if self in self.pool.lanes:
            self.pool.lanes.remove(self)
            self.pool.freed()
        self._scope.cancel()

    async def _supervise(self) -> None:
        failures = 0
        timeout = self.pool.upstream.timeout
        while True:
            self._lost = anyio.Event()
            began = anyio.current_time()
            connected = False
            ended = "the connection ended"
            try:
                # The handshake's deadline encloses the whole connection (a scope cannot end inside it), and is
                # lifted once the handshake is done.
                with anyio.CancelScope(deadline=math.inf if timeout is None else began + timeout) as handshake:
                    async with self._connected() as connection:
                        handshake.deadline = math.inf
                        connected = True
                        self.connection = connection
                        client = connection.client
                        self.spoke = client.protocol_version
                        log.info("upstream %s connected (protocol %s)", self.label, client.protocol_version)
                        await self.pool.relay.connected(self, client)
                        await self._serve(client)
                        ended = connection.ended or ended
                if handshake.cancelled_caught:
                    ended = f"it did not complete the MCP handshake within {timeout:g} s"
            except Exception as error:  # what ended the connection, or kept it from starting, in any form
                ended = _described(error, bare=self.pool.upstream.credential is not None)
            finally:
                if self.connection is not None:
                    self.lost(self.connection, ended)
                self.connection = None
            stayed = anyio.current_time() - began
            failures = 0 if connected and stayed > LAST_BACKOFF else failures
            delay = min(LAST_BACKOFF, FIRST_BACKOFF * 2**failures)
            failures += 1
            self.retry_at = anyio.current_time() + delay
            if connected:
                self._unsettle()
                self.status, self.problem = "restarting", ended
                log.warning("upstream %s: %s; connecting again in %.2g s", self.label, ended, delay)
            else:
                self.status, self.problem = "down", f"could not be started: {ended}"
                if self.owner is not None and self.refused is not None:
                    self.pool.refuse(self)  # it would only be refused again, until its owner connects anew
                self._settled.set()
                log.warning("upstream %s %s; trying again in %.2g s", self.label, self.problem, delay)
            await anyio.sleep(delay)
            self._unsettle()
            self.status = "starting"

    def stop(self) -> None:
        self.status, self.problem = "stopped", "was stopped with the gateway"
        self._settled.set()

    def _unsettle(self) -> None:
        """Calls that arrive from now on wait for the next attempt's outcome (none waits on a set event)."""
        if self._settled.is_set():
            self._settled = anyio.Event()

    async def settled(self) -> None:
        """Until the lane is up, or its last attempt to connect failed, or it stopped."""
        await self._settled.wait()

    async def ready(self, deadline: Deadline, what: str) -> Connection:
        """The lane's connection once it is up, waiting while it (re)starts; a down lane fails at once.

        The deadline is renewed once the lane is up: the upstream's time to answer starts when it has a
        session to answer on, not while the call waited for one.
        """
        while True:
            connection = self.connection
            if self.status == "up" and connection is not None:
                deadline.renew()
                return connection
            if self.status in ("down", "stopped"):
                raise _unavailable(self, what)
            with deadline.watching() as watch:
                await self._settled.wait()
            if watch.cancelled_caught:
                raise timed_out(self, what, self.pool.upstream.timeout, waiting=True)

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[Connection]:
        upstream = self.pool.upstream
        secret = await self._secret()
        async with AsyncExitStack() as stack:
            first = "legacy" if upstream.era != "2026-07-28" else "auto"
            try:
                connection = self._connection(first, secret)
                await stack.enter_async_context(connection.client)
            except Exception as error:  # the SDK's task groups hand a refusal on inside a group
                if connection.refused is not None and secret is not None:
                    self.refused = secret.version
                    raise self._refused_credential(connection.refused) from None
                refused = _mcp_error(error)
                if refused is None:
                    raise
                bare = secret is not None
                if upstream.era != "auto" or refused.code == CONNECTION_CLOSED:
                    raise _not_started(refused, bare=bare) from None
                # A server of 2026-07-28 alone refuses the handshake (-32022, or an error of its own).
                said = f"error {refused.code}" if bare else str(refused)
                log.info("upstream %s refused the handshake (%s); discovering instead", self.label, said)
                try:
                    connection = self._connection("auto", secret)
                    await stack.enter_async_context(connection.client)
                except Exception as error:
                    refused = _mcp_error(error)
                    if refused is None:
                        raise
                    raise _not_started(refused, bare=bare) from None
            if upstream.era == "2026-07-28" and connection.client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                raise UpstreamUnavailable(f"it speaks {connection.client.protocol_version}, not 2026-07-28")
            self.refused = None
            self.version = None if secret is None else secret.version
            yield connection

    def _refused_credential(self, status: int) -> UpstreamUnavailable:
        return UpstreamUnavailable(
            f"it refused the credential of {self.owner} (HTTP {status}); connecting it again (the gateway's tool "
            f"{CONNECT_TOOL!r} under the upstream's prefix) replaces it"
        )

    def denied(self, refusal: Refusal, what: str) -> MCPError:
        """The upstream refused (401 or 403: `refusal`) a request of the lane's connection, which was up: it no longer
        takes the credential (an expired token, a revoked key). That version of the credential is refused from now on,
        so that its owner's next call asks them to connect again, and the lane takes no more calls and is closed once
        those on it ended (each of them ends as the upstream answers it: one that ran was not cut); the error says so,
        never quoting the credential. An upstream without a credential refused the gateway's request as such (it
        wants one the gateway was not given): nothing of the person's is to connect, and the lane goes on; so does one
        whose credential was taken, but without the scope the request needs."""
        status = refusal.status
        if refusal.scope is not None:
            credential = self.pool.upstream.credential is not None
            whose = f"the credential of {self.owner}" if credential else "the gateway's request"
            wanted = f" (it asks for {refusal.scope!r})" if refusal.scope else ""
            return MCPError(
                INTERNAL_ERROR,
                f"upstream {self.label} refused {what} (HTTP {status}, insufficient_scope), so it did not run there: "
                f"it takes {whose}, but not with the scope this call needs{wanted}",
                {"upstream": self.pool.upstream.name},
            )
        if self.pool.upstream.credential is None:
            return MCPError(
                INTERNAL_ERROR,
                f"upstream {self.label} refused {what} (HTTP {status}), so it did not run there: the upstream asks for "
                "an authorization that the gateway does not send (it has no credential configured for it)",
                {"upstream": self.pool.upstream.name},
            )
        self.refused = self.version
        if self.refused is not None:
            self.pool.refuse(self)
        return MCPError(
            INTERNAL_ERROR,
            f"upstream {self.label} refused the credential of {self.owner} (HTTP {status}), so {what} did "
            f"not run there; connecting it again (the gateway's tool {CONNECT_TOOL!r} under the upstream's prefix) "
            "replaces it",
            {"upstream": self.pool.upstream.name},
        )

    async def _secret(self) -> Secret | None:
        """The owner's secret, read anew for every connection (a person who connected again is carried with the new
        one); None for an upstream without a credential."""
        credential = self.pool.upstream.credential
        if credential is None:
            return None
        assert self.owner is not None
        assert self.pool.secrets is not None
        secret = await self.pool.secrets(self.owner)
        if secret is None:
            raise UpstreamUnavailable(f"has no credential of {self.owner}: they have not connected it (or no longer)")
        if secret.value is None:  # refused as one the upstream refused: the person is asked to connect again
            self.refused = secret.version
            raise UpstreamUnavailable(
                f"cannot open the credential of {self.owner} in the vault (see its log); connecting it again (the "
                f"gateway's tool {CONNECT_TOOL!r} under the upstream's prefix) replaces it"
            )
        unfit = credential.unfit(secret.value)
        if unfit is not None:  # refused here, before the HTTP client or the process quotes it in an error
            self.refused = secret.version
            raise UpstreamUnavailable(
                f"cannot carry the credential of {self.owner}: it {unfit}; connecting it again (the gateway's tool "
                f"{CONNECT_TOOL!r} under the upstream's prefix) replaces it"
            )
        return secret

    def _connection(self, mode: str, secret: Secret | None) -> Connection:
        upstream = self.pool.upstream
        value = secret.value if secret is not None else None  # `_secret` gave none without its value
        credential = upstream.credential if value is not None else None
        transport: Any
        if upstream.url is not None:
            headers = credential.headers(value) if credential is not None and value is not None else {}
            transport = _http(
                upstream.url,
                lambda said: connection.forget(said),
                headers,
                lambda refusal: connection.refuse(refusal),
            )
        else:
            env = {**inherited(os.environ, self.pool.withheld, upstream.pass_env), **(upstream.env or {})}
            if credential is not None and value is not None:
                env.update(credential.variables(value))
            command, *args = upstream.command
            transport = stdio_client(StdioServerParameters(command=command, args=args, env=env, cwd=upstream.cwd))
        relay = self.pool.relay

        async def on_elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
            return await relay.elicit(self, params)

        async def on_sample(
            context: ClientRequestContext, params: CreateMessageRequestParams
        ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
            answer = await relay.ask_client(self, CreateMessageRequest(params=params))
            assert not isinstance(answer, ListRootsResult)
            return answer

        async def on_roots(context: ClientRequestContext) -> ListRootsResult | ErrorData:
            answer = await relay.ask_client(self, ListRootsRequest())
            assert isinstance(answer, ListRootsResult | ErrorData)
            return answer

        async def on_log(params: LoggingMessageNotificationParams) -> None:
            await relay.logged(self, params)

        async def on_message(message: ServerNotification | Exception) -> None:
            if not isinstance(message, Exception):
                await relay.notified(self, message)

        connection = Connection(
            Client(
                _Watched(transport, lambda: self.lost(connection, ENDED)),
                mode=mode,
                cache=None,
                client_info=Implementation(name="mcp-elicit-gateway", version=version("mcp-elicit")),
                elicitation_callback=on_elicit,
                sampling_callback=on_sample,
                list_roots_callback=on_roots,
                logging_callback=on_log,
                message_handler=on_message,
            )
        )
        return connection

    async def _serve(self, client: Client) -> None:
        """Up until the connection ends. On a 2026-07-28 session the upstream's list changes come on a listen
        stream, open before the lane says it is up, so that no change made by a call it carries is missed."""
        capabilities = client.server_capabilities
        if self.modern and capabilities.tools is not None:
            await self.learn_tools(client)
        async with anyio.create_task_group() as tasks:
            if self.modern and self.pool.tells_changes(self) and any(listed_changes(capabilities)):
                await tasks.start(self._listen, client, capabilities)
            if not self._lost.is_set():
                self.status, self.problem = "up", ""
                self._settled.set()
            await self._lost.wait()
            tasks.cancel_scope.cancel()

    async def learn_tools(self, client: Client) -> None:
        """The upstream's tools listed through the SDK's client on a 2026-07-28 session, on connecting and when the
        list changes: it mirrors the arguments a tool annotates with `x-mcp-header` into the `Mcp-Param-*` headers an
        HTTP upstream requires of its `tools/call`, for the tools its session listed, and the gateway relays its
        clients' listings as they came, past it. Not listed in time, a call of such a tool is refused upstream."""
        params: PaginatedRequestParams | None = None
        with anyio.move_on_after(self.pool.upstream.timeout or math.inf):
            try:
                while True:
                    listed = await client.session.list_tools(params=params)
                    if not listed.next_cursor:
                        return
                    params = PaginatedRequestParams(cursor=listed.next_cursor)
            except (MCPError, ValidationError) as error:
                log.info("upstream %s: its tools could not be listed: %s", self.label, error)
                return
        log.info("upstream %s did not list its tools in time", self.label)

    async def _listen(
        self,
        client: Client,
        capabilities: ServerCapabilities,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The upstream's `subscriptions/listen` stream, opened again after a drop (with a backoff of its own)."""
        tools, prompts, resources = listed_changes(capabilities)
        pause = FIRST_BACKOFF
        told = False
        while True:
            try:
                async with client.listen(
                    tools_list_changed=tools, prompts_list_changed=prompts, resources_list_changed=resources
                ) as subscription:
                    pause = FIRST_BACKOFF
                    if not told:
                        told = True
                        task_status.started()
                    async for event in subscription:
                        await self.pool.relay.event(event)
                        if isinstance(event, ToolsListChanged):
                            for lane in self.pool.lanes:
                                if lane.modern and lane.client is not None:
                                    await lane.learn_tools(lane.client)
            except (MCPError, SubscriptionLost, TimeoutError) as error:
                log.info("upstream %s: its list-change stream ended (%s); listening again", self.label, error)
            if not told:
                told = True
                task_status.started()
            await anyio.sleep(pause)
            pause = min(LAST_BACKOFF, pause * 2)


def listed_changes(capabilities: ServerCapabilities) -> tuple[bool, bool, bool]:
    """Which lists (tools, prompts, resources) the upstream says it announces changes of."""
    return (
        bool(capabilities.tools and capabilities.tools.list_changed),
        bool(capabilities.prompts and capabilities.prompts.list_changed),
        bool(capabilities.resources and capabilities.resources.list_changed),
    )


class Pool:
    """The upstream's lanes: the first connected at start, more as calls need them, up to its session limit."""

    def __init__(self, upstream: Upstream, relay: Relay, secrets: Secrets | None = None) -> None:
        if upstream.credential is not None and secrets is None:
            raise ValueError(f"upstream {upstream.name!r} has a credential: its pool needs where to read secrets from")
        self.upstream = upstream
        self.relay = relay
        self.secrets = secrets
        """Where a lane of an upstream with a credential reads its owner's secret, as it connects."""
        self.lanes: list[Lane] = []
        self.withheld: frozenset[str] = frozenset()
        """Variables of the gateway's environment its processes never get besides its own settings: the OAuth client
        secrets of every upstream of the gateway (`running` sets it)."""
        self.refusals: dict[str, str] = {}
        """The version of each principal's credential that the upstream refused last (`Lane.refused`), kept after
        the lane that tried it closed: their calls ask them to connect again until they store another."""
        self._opened = 0
        self._tasks: anyio.abc.TaskGroup | None = None
        self._freed = anyio.Event()

    @property
    def first(self) -> Lane:
        """The lane that relays list changes (every session of the upstream hears them; one notice is enough), up
        from the start; an upstream with a credential has none of its own (see `tells_changes`)."""
        return self.lanes[0]

    def tells_changes(self, lane: Lane) -> bool:
        """Whether what `lane` hears of list changes (and its listing, on connecting) is passed on: the first lane's;
        for an upstream with a credential, every lane's, each being one person's session, whose lists are that
        person's."""
        return self.upstream.credential is not None or (bool(self.lanes) and lane is self.first)

    @property
    def modern(self) -> bool:
        """Whether the upstream speaks 2026-07-28, as its sessions said (an upstream with a credential that no one
        connected yet: as its era is pinned)."""
        spoken = next((lane for lane in self.lanes if lane.era is not None), None)
        return spoken.modern if spoken is not None else self.upstream.era == "2026-07-28"

    def personal(self, call: Call) -> bool:
        """Whether `call` rides only lanes of its principal's own (`Lane.owner`): on an upstream with a credential, and
        on a handshake upstream behind a signed-in gateway (a 2026-07-28 one keeps nothing per session)."""
        if self.upstream.credential is not None:
            return True
        return call.principal is not None and not self.modern

    def carries(self, principal: str) -> bool:
        """Whether a lane of `principal`'s credential is up, and not suspected of carrying one they replaced: they
        connected it, and the upstream took it."""
        lanes = self.owned(principal)
        return any(lane.status == "up" for lane in lanes) and not any(lane.suspect for lane in lanes)

    def owned(self, principal: str) -> list[Lane]:
        """The lanes of `principal`'s credential that take calls."""
        return [lane for lane in self.lanes if lane.owner == principal and not lane.retired]

    def suspect(self, principal: str) -> None:
        """`principal` may be replacing their credential: their lanes are checked against the vault before each of
        their calls, until one is found replaced (`renew`)."""
        for lane in self.owned(principal):
            lane.suspect = True

    def refuse(self, lane: Lane) -> None:
        """The upstream refused the credential `lane` carries (`Lane.refused`): the refusal is kept for its owner, and
        the lane takes no more calls and is closed once those on it ended (its supervisor stops: it would only be
        refused again, until its owner connects another credential, which opens a new lane); so are their other lanes
        that carry the same credential, which their next call would otherwise ride to the same refusal."""
        assert lane.owner is not None
        refused = lane.refused
        assert refused is not None
        self.refusals[lane.owner] = refused
        for each in [
            lane,
            *(other for other in self.owned(lane.owner) if other is not lane and other.version == refused),
        ]:
            each.refused = refused
            each.retired = True
            if each.idle:
                each.close()

    def renew(self, principal: str) -> None:
        """`principal` connected a new credential: their lanes take no more calls and close once idle, so that their
        next calls open lanes that carry it."""
        for lane in list(self.lanes):
            if lane.owner == principal:
                lane.retired = True
                if lane.idle:
                    lane.close()

    def freed(self) -> None:
        """A lane may be claimed now: calls waiting for one look again."""
        self._freed.set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        """The pool with its first lane up; `UpstreamUnavailable` if that lane could not connect."""
        async with running((self,)):
            yield self

    def _open(self, owner: str | None = None) -> Lane:
        """A new lane (of `owner`'s credential), its supervisor started in the pool's task group (where no caller's
        cancellation reaches)."""
        assert self._tasks is not None
        lane = Lane(self, self._opened, owner=owner)
        self._opened += 1
        self.lanes.append(lane)
        self._tasks.start_soon(lane.supervise)
        return lane

    @asynccontextmanager
    async def carrying(self, call: Call) -> AsyncIterator[tuple[Lane, Connection]]:
        """A lane for `call` and its connection, with the call on it until the block ends.

        A call on a lane already rides it again, and the lane is let go when the last of its blocks ends: a
        gated forward takes its lane before its start is marked durable (so that a call cancelled while it waits
        for a busy upstream has not started), and its upstream request, in the gateway's task group, then rides
        that lane for as long as it is in flight (`mcp_elicit.gateway.questions`). The call's clock starts anew
        when it first waits for a lane: a gated call's approval, however long, was not the upstream's time."""
        if call.lane is None:
            call.deadline.renew()
            call.lane, call.claimed = await self._claim(call)
            call.lane.calls.append(call)
        lane = call.lane
        call.rides += 1
        try:
            yield lane, await lane.ready(call.deadline, call.what)
        finally:
            call.rides -= 1
            if not call.rides:
                lane.calls.remove(call)
                call.lane = None
                self._let_go(lane, call)

    def _let_go(self, lane: Lane, call: Call) -> None:
        if call.claimed:
            lane.claims -= 1
            if not lane.claims:
                lane.holder = None
                self._freed.set()
        if call.principal is not None:
            lane.occupants -= 1
            if not lane.occupants:
                lane.principal = None
                self._freed.set()
        if lane.retired and lane.idle:
            lane.close()

    async def _claim(self, call: Call) -> tuple[Lane, bool]:
        """A lane free for the call's holder (any lane up, for a call that draws no question or on a 2026-07-28
        session) and its principal, and whether it was claimed for the holder; a new lane while there are fewer
        than the upstream's session limit; else the wait for one to be freed. For a call that rides lanes of its
        principal's own (`personal`), one of theirs (or, of an upstream without a credential, one of no one's,
        which becomes theirs), and at the limit an idle lane of another's closed to make room."""
        owned = self.upstream.credential is not None
        if owned and call.principal is None:
            raise ValueError(f"upstream {self.upstream.name!r} has a credential: its calls need a principal")
        while True:
            personal = self.personal(call)
            mine = (call.principal,) if owned or not personal else (call.principal, None)
            free = [
                lane
                for lane in self.lanes
                if (call.holder is None or lane.modern or lane.holder in (None, call.holder))
                and lane.principal in (None, call.principal)
                and (lane.owner in mine if personal else not owned)
                and not lane.retired
            ]
            if free:
                lane = next((lane for lane in free if lane.status == "up" and lane.owner is not None), None)
                lane = lane or next((lane for lane in free if lane.status == "up"), free[0])
                claimed = call.holder is not None and not lane.modern
                if claimed:
                    lane.holder = call.holder
                    lane.claims += 1
                if call.principal is not None:
                    lane.principal = call.principal
                    lane.occupants += 1
                if personal:
                    lane.owner = call.principal
                return lane, claimed
            if len(self.lanes) < self.upstream.session_limit and self._tasks is not None:
                self._open(call.principal if personal else None)
                continue
            idle = next((lane for lane in self.lanes if personal and lane.owner != call.principal and lane.idle), None)
            if idle is not None:
                log.info("upstream %s: closed, idle, to open a session for another person", idle.label)
                idle.close()
                continue
            if self._freed.is_set():
                self._freed = anyio.Event()
            freed = self._freed
            log.debug(
                "%s waits for a session of upstream %r: each of its %d carries calls of another client",
                call.what,
                self.upstream.name,
                self.upstream.session_limit,
            )
            with call.deadline.watching() as watch:
                await freed.wait()
            if watch.cancelled_caught:
                raise MCPError(
                    REQUEST_TIMEOUT,
                    f"upstream {self.upstream.name!r} is busy: {call.what} waited {self.upstream.timeout:g} s for one "
                    f"of its {self.upstream.session_limit} session(s), each carrying calls of another client",
                    {"upstream": self.upstream.name},
                )


@asynccontextmanager
async def running(pools: Sequence[Pool]) -> AsyncIterator[None]:
    """Every pool with its first lane up, all started at once; `UpstreamUnavailable` as soon as one could not
    connect, naming it (and any other that failed by then), and then none of them runs."""
    refused: list[str] = []
    secrets = frozenset(
        pool.upstream.credential.client_secret_env
        for pool in pools
        if pool.upstream.credential is not None and pool.upstream.credential.client_secret_env is not None
    )
    async with anyio.create_task_group() as tasks:
        firsts = []
        for pool in pools:
            pool._tasks = tasks
            pool.withheld = secrets
            if pool.upstream.credential is None:  # an upstream with a credential is reached as each person connects it
                firsts.append(pool._open())
        with anyio.CancelScope() as waiting:
            async with anyio.create_task_group() as waits:
                for lane in firsts:
                    waits.start_soon(_settle, lane, waiting)
        refused = [f"upstream {lane.label} {lane.problem}" for lane in firsts if lane.status in ("down", "stopped")]
        if refused:
            tasks.cancel_scope.cancel()
        else:
            try:
                yield
            finally:
                for pool in pools:
                    pool._tasks = None
                    for lane in pool.lanes:
                        lane.stop()
                tasks.cancel_scope.cancel()
    if refused:  # raised here, not in the task group, so that it is not wrapped in a group
        raise UpstreamUnavailable("; ".join(refused))


async def _settle(lane: Lane, waiting: anyio.CancelScope) -> None:
    await lane.settled()
    if lane.status != "up":
        waiting.cancel()


def inherited(
    environ: Mapping[str, str], withheld: frozenset[str] = frozenset(), passed: Collection[str] = ()
) -> dict[str, str]:
    """What a stdio upstream's process inherits of the gateway's environment `environ`: all of it (`PATH` and the
    rest a command typed at the shell would see) but the gateway's own settings, every `MCP_ELICIT_*` variable (the
    vault's keys, the sign-in keys, the store's URL) other than those `passed` names, and the variables in `withheld`
    (OAuth client secrets). No secret setting (`HELD_SECRETS`) is passed, even named. The process may be a person's
    own, started with their credential: what the gateway keeps from them, it keeps from it.
    """
    return {
        name: value
        for name, value in environ.items()
        if name not in withheld
        and (not name.upper().startswith(GATEWAY_VARIABLES) or (name in passed and name.upper() not in HELD_SECRETS))
    }


def timed_out(lane: Lane, what: str, timeout: float | None, *, waiting: bool = False) -> MCPError:
    within = f"within {timeout:g} s" if timeout is not None else "in time"
    if waiting:
        said = f"did not come up {within} for {what} ({lane.problem or 'starting'})"
    else:
        said = f"did not answer {what} {within} (nor report progress); the request was cancelled"
    return MCPError(REQUEST_TIMEOUT, f"upstream {lane.label} {said}", {"upstream": lane.pool.upstream.name})


def refused_by_upstream(error: MCPError) -> bool:
    """Whether `error` can only be the upstream's own answer to a request it received: a code the SDK's client never
    makes up (it makes up -32000 and -32001 for a connection or stream that ended, -32603 for an HTTP error such as
    a proxy's 502, -32700 for a body it cannot parse), so the request reached the upstream and was refused."""
    code = error.code
    return code in (INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS) or not -32768 <= code <= -32000


def _unavailable(lane: Lane, what: str) -> MCPError:
    """Why `what` was not sent on the down (or stopped) `lane`, and when it connects again: never, once retired (a
    refused credential), and then the problem says what to do."""
    wait = max(0.0, lane.retry_at - anyio.current_time())
    again = "" if lane.retired or lane.status == "stopped" else f" (next attempt in {wait:.2g} s)"
    said = f"upstream {lane.label} {lane.problem}; {what} was not sent{again}"
    return MCPError(INTERNAL_ERROR, said, {"upstream": lane.pool.upstream.name})


def _mcp_error(error: BaseException) -> MCPError | None:
    """The protocol error in `error`, looking inside the groups task groups wrap errors in."""
    if isinstance(error, MCPError):
        return error
    if isinstance(error, BaseExceptionGroup):
        found = [inner for inner in map(_mcp_error, error.exceptions) if inner is not None]
        return found[0] if found else None
    return None


def _not_started(refused: MCPError, *, bare: bool = False) -> UpstreamUnavailable:
    """Why the handshake failed; `bare` (the connection carries a person's credential): without the upstream's text,
    which may quote what the request carried."""
    if refused.code == CONNECTION_CLOSED:
        return UpstreamUnavailable(
            "it closed the connection before the MCP handshake was done (see its own error output)"
        )
    if bare:
        return UpstreamUnavailable(f"it refused the MCP handshake (error {refused.code})")
    return UpstreamUnavailable(f"it refused the MCP handshake: {refused.error.message}")


def _described(error: BaseException, *, bare: bool = False) -> str:
    """One line for what ended a connection: the innermost errors of a group, each with its type. `bare` (the
    connection carries a person's credential): the type alone (and a protocol error's code), never the text, which
    may quote the credential (an HTTP client refusing a header quotes its value); the gateway's own errors, which
    never do, keep theirs."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_described(inner, bare=bare) for inner in error.exceptions))
    said = str(error).strip().splitlines()[0] if str(error).strip() else ""
    kind = type(error).__name__
    if isinstance(error, UpstreamUnavailable):
        return said or kind
    if bare:
        return f"{kind} {error.code}" if isinstance(error, MCPError) else kind
    if isinstance(error, MCPError):
        return said or kind
    return f"{kind}: {said}" if said else kind


@asynccontextmanager
async def _http(
    url: str,
    forgotten: Callable[[ErrorData | None], None],
    headers: Mapping[str, str],
    refused: Callable[[Refusal], str],
) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport, with `headers` on every request (a person's credential), over a client
    that reads what the upstream's answers say of the session and of the credential (`_UpstreamHttp`)."""
    # The SDK's own defaults: a response stream may stay open long without a byte.
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        _UpstreamHttp(forgotten, refused, timeout=timeout, headers=dict(headers)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


async def _said(response: httpx2.Response) -> JSONRPCError | None:
    """The JSON-RPC error a response's body is, if it is one (read here; the SDK reads the same bytes again)."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return None
    try:
        return JSONRPCError.model_validate_json(await response.aread())
    except (httpx2.StreamError, ValidationError):
        return None


class _UpstreamHttp(httpx2.AsyncClient):
    """HTTP to the upstream, each answer read for what it says before the SDK's transport sees it.

    A 404 to a request that names the session is the protocol's sign that the server no longer knows it (it
    restarted, or ended the session): `forgotten` is told, with the JSON-RPC error its body said if any; a 404
    whose body is a JSON-RPC error answering that very request (its id) is the upstream's answer to it (a server
    may answer `-32601` so), not a lost session. A 401 or 403 to a POST of a JSON-RPC request (one with an id)
    becomes a JSON-RPC error answering that request, carrying the token `refused` gives for it: the client hands
    it to that request's caller alone, and the relay tells it from any other failure (`Connection.denied`). A 401
    or 403 to anything else (the client's standalone GET stream, a notification) blames no request. A 403 with
    `insufficient_scope` (the credential is taken, but not for this: the MCP specification's step-up answer) is
    told apart (`Refusal.scope`). Done on the client's responses, not in a transport of its own: a client given a
    transport takes no proxy from the environment (`HTTPS_PROXY` and the rest), through which its host may reach
    the upstream."""

    def __init__(
        self, forgotten: Callable[[ErrorData | None], None], refused: Callable[[Refusal], str], **options: Any
    ) -> None:
        super().__init__(**options)
        self._forgotten = forgotten
        self._refused = refused

    async def send(self, request: httpx2.Request, **options: Any) -> httpx2.Response:
        response = await super().send(request, **options)
        status = response.status_code
        if status == 404 and MCP_SESSION_ID in request.headers:
            said = await _said(response)
            if said is None or said.id is None or said.id != _request_id(request):
                self._forgotten(None if said is None else said.error)
            return response
        if status not in (401, 403) or request.method != "POST":
            return response
        request_id = _request_id(request)
        if not isinstance(request_id, int | str):
            return response
        await response.aclose()
        challenge = response.headers.get("www-authenticate", "")
        scope = None
        if status == 403 and "insufficient_scope" in challenge:
            named = _SCOPE.search(challenge)
            scope = named.group(1) if named else ""
        token = self._refused(Refusal(status, scope))
        said = JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=ErrorData(code=INTERNAL_ERROR, message=f"HTTP {status}", data={_REFUSAL: token}),
        )
        body = said.model_dump_json(by_alias=True, exclude_none=True).encode()
        return httpx2.Response(status, headers={"content-type": "application/json"}, content=body, request=request)


_SCOPE = re.compile(r'\bscope="([^"]{0,200})"')


def _request_id(request: httpx2.Request) -> object:
    try:
        sent = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return None
    return sent.get("id") if isinstance(sent, dict) else None


class _Watched:
    """A transport that says when it is over: its read side ended (for stdio, the upstream process exited), or
    the read was cancelled, which happens only when the client is torn down (the transport failed, or the
    connection was given up). Either is said before the client fails the requests still waiting."""

    def __init__(self, inner: Any, ended: Callable[[], None]) -> None:
        self._inner = inner
        self._ended = ended

    async def __aenter__(self) -> tuple[_WatchedRead, Any]:
        read, write = await self._inner.__aenter__()
        return _WatchedRead(read, self._ended), write

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(kind, error, trace)
        return result


class _WatchedRead:
    def __init__(self, inner: Any, ended: Callable[[], None]) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> contextvars.Context | None:
        context: contextvars.Context | None = getattr(self._inner, "last_context", None)
        return context

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended()
            raise
        except anyio.get_cancelled_exc_class():
            self._ended()
            raise
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
