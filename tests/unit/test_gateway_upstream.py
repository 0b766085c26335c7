"""What `--upstream` means: an http(s) URL, or a command line split as a POSIX shell splits it; and every
setting of an upstream refused with the reason when it cannot work."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_elicit.gateway import DEFAULT_TIMEOUT, HTTP_SESSIONS, Upstream
from mcp_elicit.gateway.upstream import inherited


def test_a_url_is_an_http_upstream_named_by_its_url() -> None:
    upstream = Upstream.parse("  https://tools.example/mcp ")
    assert (upstream.url, upstream.command, upstream.name) == (
        "https://tools.example/mcp",
        (),
        "https://tools.example/mcp",
    )
    assert (upstream.era, upstream.timeout, upstream.sessions) == ("auto", DEFAULT_TIMEOUT, None)
    assert upstream.session_limit == HTTP_SESSIONS == 8  # clients take turns on a session: a few by default


def test_a_command_line_is_split_as_a_shell_splits_it_and_named_as_given() -> None:
    upstream = Upstream.parse("npx -y 'my server' --flag=\"two words\"", era="legacy", timeout=None, sessions=3)
    assert upstream.command == ("npx", "-y", "my server", "--flag=two words")
    assert upstream.url is None and upstream.name == "npx -y 'my server' '--flag=two words'"
    assert (upstream.era, upstream.timeout, upstream.session_limit) == ("legacy", None, 3)
    by_default = Upstream.parse("node server.js", name="billing")
    assert (by_default.name, by_default.session_limit) == ("billing", 1)  # one process: one state, not split


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("", "the upstream command is empty"),
        ("   ", "the upstream command is empty"),
        ("ws://tools.example/mcp", "'ws://tools.example/mcp': an upstream URL is http:// or https://"),
        ("node 'server.js", '"node \'server.js" is not a command line: No closing quotation'),
    ],
)
def test_an_upstream_that_is_neither_is_refused_saying_why(target: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        Upstream.parse(target)
    assert str(refused.value) == problem


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({}, "an upstream is either a command or a URL"),
        ({"command": ("node",), "url": "https://tools.example/mcp"}, "an upstream is either a command or a URL"),
        ({"command": ("node",), "era": "2025-11-25"}, "era must be one of auto, legacy, 2026-07-28, not '2025-11-25'"),
        ({"command": ("node",), "sessions": 0}, "sessions must be at least 1, not 0"),
        ({"command": ("node",), "timeout": 0}, "timeout must be a positive number of seconds, not 0"),
        ({"command": ("node",), "timeout": -1.5}, "timeout must be a positive number of seconds, not -1.5"),
        (
            {"url": "https://tools.example/mcp", "pass_env": ("MCP_ELICIT_STORE",)},
            "upstream 'upstream': pass_env is for a command; one given by url is not started here",
        ),
        (
            {"command": ("node",), "pass_env": ("MCP_ELICIT_STORE", "MCP_ELICIT_VAULT_KEYS_FILE", "MCP_ELICIT_USERS")},
            "upstream 'upstream': pass_env names MCP_ELICIT_USERS, MCP_ELICIT_VAULT_KEYS_FILE, holding the gateway's "
            "secrets, which no upstream is given",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused_saying_why(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        Upstream("upstream", **settings)
    assert str(refused.value) == problem


def test_a_process_inherits_the_variables_pass_env_names_and_never_a_secret_of_the_gateway() -> None:
    environ = {
        "PATH": "/usr/bin",
        "MCP_ELICIT_STORE": "sqlite:///elicit.db",
        "MCP_ELICIT_LOG_FORMAT": "json",
        "MCP_ELICIT_AUTH_KEYS": "k",
        "mcp_elicit_vault_keys": "v",
        "EXAMPLE_CLIENT_SECRET": "s",
    }
    assert inherited(environ) == {"PATH": "/usr/bin", "EXAMPLE_CLIENT_SECRET": "s"}
    passed = ("MCP_ELICIT_STORE", "MCP_ELICIT_AUTH_KEYS", "mcp_elicit_vault_keys", "EXAMPLE_CLIENT_SECRET")
    assert inherited(environ, frozenset({"EXAMPLE_CLIENT_SECRET"}), passed) == {
        "PATH": "/usr/bin",
        "MCP_ELICIT_STORE": "sqlite:///elicit.db",
    }
