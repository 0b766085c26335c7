"""What the commands that listen (`serve`, `gateway`) share: the loopback names, an address as a URL, and the
`--log-format` option. Kept apart from both so that neither loads the other's imports at start-up."""

from __future__ import annotations

from typing import Annotated

import typer

from mcp_elicit.logging import LOG_FORMAT_ENV, LogFormat

LOOPBACK = ("127.0.0.1", "::1", "localhost")

LogFormatOption = Annotated[
    LogFormat,
    typer.Option(envvar=LOG_FORMAT_ENV, help="Log lines on stderr: text, or json (one object per line, with ids)."),
]


def http_address(host: str, port: int) -> str:
    """`http://host:port`, an IPv6 host in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
