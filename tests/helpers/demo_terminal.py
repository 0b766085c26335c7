"""`mcp-elicit demo` at a terminal: how long a run may take, and the ports its server and provider listen on."""

from __future__ import annotations

import socket

from tests.helpers.cli_terminal import Terminal

DEMO_TIMEOUT = 120.0
SERVER = r"reference server\s+http://127\.0\.0\.1:(\d+)"
PROVIDER = r"Example provider\s+http://127\.0\.0\.1:(\d+)"


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def ports(terminal: Terminal) -> list[int]:
    return [int(terminal.search(SERVER).group(1)), int(terminal.search(PROVIDER).group(1))]
