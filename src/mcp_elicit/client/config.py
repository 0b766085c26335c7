"""What an `ElicitingClient` is built from: where the server is, and the options that travel together.

A server is reached over streamable HTTP (`Http`, with whatever authenticates the host), as a child
process over stdio (`Stdio`), or in this process (an SDK `Server` or `MCPServer`, passed as it is).
`Timeouts` bounds a silent server; `SdkOptions` is what the kit hands to the SDK's client unchanged.
Each checks itself when built, so a wrong combination fails where it was written, not at connection.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
from mcp.client.session import ListRootsFnT, MessageHandlerFnT, SamplingFnT
from mcp_types import Implementation

log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT = 1800.0
"""Seconds a server may send nothing on a call while no person is deciding (30 minutes)."""
DEFAULT_CONNECT_TIMEOUT = 120.0
"""Seconds for the whole connection set-up: its own limit, since starting a stdio server (an interpreter,
a container) may take far longer than a host wants a silent call to last."""


@dataclass(frozen=True, slots=True)
class Http:
    """A streamable HTTP MCP endpoint (`http://` or `https://`) and how the host authenticates to it.

    `bearer_token` is sent as `Authorization: Bearer ...`; `auth` is an `httpx2.Auth` (the SDK's OAuth
    provider, say); `headers` go with every request. Or pass a ready `http_client` instead of all three:
    its timeouts are then the caller's choice, and a read timeout there cuts a person who takes longer to
    decide, so one is warned about (the kit's own client, `kit_http_client`, has none).
    `endpoint`: how the person is told where the server is, next to the name the server gives itself
    (which any server can make up); by default the URL without credentials, query or fragment.
    """

    url: str
    bearer_token: str | None = field(default=None, repr=False)
    auth: httpx2.Auth | None = field(default=None, repr=False)
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    http_client: httpx2.AsyncClient | None = field(default=None, repr=False)
    endpoint: str | None = None

    def __post_init__(self) -> None:
        if urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"an HTTP server's URL must be http:// or https://, not {self.url!r}")
        if self.bearer_token is not None and self.auth is not None:
            raise ValueError("pass bearer_token or auth, not both")
        own = self.bearer_token is not None or self.auth is not None or self.headers is not None
        if own and self.http_client is not None:
            raise ValueError("pass bearer_token, auth and headers, or a configured http_client, not both")
        if self.http_client is not None and self.http_client.timeout.read is not None:
            log.warning(
                "the http_client given has a read timeout of %g s: a call is cut when a person takes longer to "
                "decide; the kit's own client (kit_http_client) has none and cuts only a silent server",
                self.http_client.timeout.read,
            )


@dataclass(frozen=True, slots=True)
class Stdio:
    """A server the kit starts as a child process and talks to over its stdin and stdout.

    It inherits only a safe few of this process's environment variables (`PATH`, `HOME` and the like, as the
    SDK chooses), with `env` set over them; `cwd` is its working directory. `endpoint`: how the person is told
    where the server is; by default the command line.
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | Path | None = None
    endpoint: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise ValueError(f"a stdio server's command is a non-empty string, not {self.command!r}")
        if isinstance(self.args, str) or not all(isinstance(arg, str) for arg in self.args):
            raise ValueError(f"a stdio server's args are a list of strings, not {self.args!r}")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a server may stay silent; None is no limit.

    `request`: seconds a server may send nothing on a call, counted only while nobody is deciding (a person
    in a dialog or, after consenting to a URL, in the browser: see `ElicitingClient`). `connect`: seconds for
    the whole connection set-up, starting a stdio server's process included.
    """

    request: float | None = DEFAULT_REQUEST_TIMEOUT
    connect: float | None = DEFAULT_CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        for name, seconds in (("request", self.request), ("connect", self.connect)):
            if seconds is not None and not seconds > 0:
                raise ValueError(f"the {name} timeout must be positive seconds or None, not {seconds!r}")


@dataclass(frozen=True, slots=True)
class SdkOptions:
    """What the kit hands to the SDK's `mcp.Client` as it is: the host's sampling and roots callbacks, its
    handler for every incoming message (called after the kit's own), and the name it gives itself (by
    default `mcp-elicit` and its version). Elicitation is the kit's own and has no option here."""

    sampling_callback: SamplingFnT | None = None
    list_roots_callback: ListRootsFnT | None = None
    message_handler: MessageHandlerFnT | None = None
    client_info: Implementation | None = None
