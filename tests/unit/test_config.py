"""The option objects of `ElicitingClient` and `Elicitation`: a wrong value or combination fails where it is
written, naming the setting; the defaults are the ones documented."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import StdioServerParameters
from mcp.server.mcpserver import MCPServer

from mcp_elicit.client import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    ElicitingClient,
    Http,
    NoPersonHandler,
    Pacing,
    Stdio,
    Timeouts,
    kit_http_client,
)
from mcp_elicit.server import DEFAULT_LEASE, Elicitation, RequestState, Timing
from mcp_elicit.server.tasks import TaskSettings

# -- the client's -------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["ftp://tools.example/mcp", "tools.example/mcp", "file:///tmp/mcp"])
def test_an_http_server_needs_an_http_or_https_url(url: str) -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        Http(url)


@pytest.mark.anyio
async def test_http_credentials_come_one_way() -> None:
    with pytest.raises(ValueError, match="bearer_token or auth, not both"):
        Http("https://tools.example/mcp", bearer_token="t", auth=httpx2.BasicAuth("u", "p"))
    async with kit_http_client() as http:
        for own in ({"bearer_token": "t"}, {"headers": {"X-Key": "k"}}, {"auth": httpx2.BasicAuth("u", "p")}):
            with pytest.raises(ValueError, match="or a configured http_client, not both"):
                Http("https://tools.example/mcp", http_client=http, **own)
        assert Http("https://tools.example/mcp", http_client=http).http_client is http


def test_an_http_servers_repr_shows_no_credentials() -> None:
    shown = repr(Http("https://tools.example/mcp", bearer_token="token-alice", headers={"X-Key": "key-alice"}))
    assert "tools.example" in shown
    assert "token-alice" not in shown and "key-alice" not in shown


@pytest.mark.parametrize(("command", "args"), [("", ()), ("python", "-m server")])
def test_a_stdio_server_is_a_command_and_a_list_of_arguments(command: str, args: Any) -> None:
    with pytest.raises(ValueError, match="stdio server's"):
        Stdio(command, args)


def test_timeouts_are_positive_or_none_and_default_to_the_documented_values() -> None:
    assert Timeouts() == Timeouts(request=DEFAULT_REQUEST_TIMEOUT, connect=DEFAULT_CONNECT_TIMEOUT)
    assert (DEFAULT_REQUEST_TIMEOUT, DEFAULT_CONNECT_TIMEOUT) == (1800.0, 120.0)
    assert Timeouts(request=None, connect=None).request is None
    with pytest.raises(ValueError, match="the request timeout must be positive"):
        Timeouts(request=0)
    with pytest.raises(ValueError, match="the connect timeout must be positive"):
        Timeouts(connect=-1)


@pytest.mark.parametrize(
    "target",
    ["https://tools.example/mcp", ["python", "-m", "server"], StdioServerParameters(command="python")],
)
def test_the_client_says_how_to_name_a_server_given_the_old_way(target: Any) -> None:
    with pytest.raises(TypeError, match=r"Http\(url\) or Stdio\(command, args\)"):
        ElicitingClient(target, NoPersonHandler())


def test_the_client_refuses_an_era_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="era must be one of"):
        ElicitingClient(Http("https://tools.example/mcp"), NoPersonHandler(), era="2024-11-05")  # type: ignore[arg-type]


def test_the_person_is_shown_where_the_server_is_without_credentials_or_as_the_host_says() -> None:
    def endpoint(target: Any) -> str | None:
        return ElicitingClient(target, NoPersonHandler()).endpoint

    assert endpoint(Http("https://alice:pw@tools.example:8443/mcp?tenant=1#x")) == "https://tools.example:8443/mcp"
    assert endpoint(Http("https://tools.example/mcp", endpoint="tools (staging)")) == "tools (staging)"
    assert endpoint(Stdio("python", ["-m", "my server"])) == "python -m 'my server'"
    assert endpoint(Stdio("python", endpoint="local tools")) == "local tools"
    assert endpoint(MCPServer("in-memory")) == "in-process server 'in-memory'"


def test_the_client_keeps_the_defaults_when_given_no_options() -> None:
    client = ElicitingClient(Http("https://tools.example/mcp"), NoPersonHandler())
    assert client.timeouts == Timeouts() and client.pacing == Pacing()
    assert client.pacing.reissue_held_calls


# -- the app's ----------------------------------------------------------------------------------------


def test_request_state_needs_keys_or_single_process_and_not_both() -> None:
    with pytest.raises(ValueError, match=r"pass keys=\[...\] .* or single_process=True"):
        RequestState()
    with pytest.raises(ValueError, match="not both"):
        RequestState(keys=[b"k" * 32], single_process=True)
    wrong: list[Any] = [[], b"k" * 32, "k" * 32]
    for keys in wrong:
        with pytest.raises(ValueError, match="a list of keys"):
            RequestState(keys=keys)
    with pytest.raises(ValueError, match="requestState ttl must be positive"):
        RequestState(single_process=True, ttl=timedelta(0))


def test_request_states_repr_shows_no_key() -> None:
    assert "secret-key" not in repr(RequestState(keys=["secret-key" * 4]))


@pytest.mark.parametrize("setting", ["operation_ttl", "lease", "long_poll", "reask_after", "sweep_interval"])
def test_each_duration_of_timing_must_be_positive(setting: str) -> None:
    with pytest.raises(ValueError, match=f"^{setting} must be positive"):
        Timing(**{setting: timedelta(0)})


def test_replay_can_be_turned_off_and_sweeping_left_to_others() -> None:
    assert Timing(replay_window=timedelta(0), sweep_interval=None).sweep_interval is None
    with pytest.raises(ValueError, match="replay_window must be zero or more"):
        Timing(replay_window=timedelta(seconds=-1))


def test_the_app_keeps_the_documented_defaults_and_the_states_ttl(tmp_path: Path) -> None:
    assert Timing() == Timing(
        replay_window=timedelta(minutes=2),
        operation_ttl=timedelta(hours=24),
        lease=DEFAULT_LEASE,
        long_poll=timedelta(seconds=5),
        reask_after=timedelta(seconds=15),
        sweep_interval=timedelta(seconds=30),
    )
    assert RequestState(single_process=True).ttl == timedelta(minutes=10)
    app = Elicitation(
        f"sqlite://{tmp_path / 'elicit.db'}", request_state=RequestState(keys=[b"k" * 32], ttl=timedelta(seconds=42))
    )
    try:
        assert app.timing == Timing()
        assert app.request_state_security.ttl == 42
    finally:
        app.close()


@pytest.mark.parametrize("url", ["ftp://tools.example", "tools.example", "https://"])
def test_the_public_base_url_is_an_http_url_with_a_host(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError, match="public_base_url must be an http"):
        Elicitation(
            f"sqlite://{tmp_path / 'elicit.db'}", request_state=RequestState(single_process=True), public_base_url=url
        )


def test_a_resource_is_registered_by_its_uri_template(tmp_path: Path) -> None:
    app = Elicitation(f"sqlite://{tmp_path / 'elicit.db'}", request_state=RequestState(single_process=True))
    try:
        with pytest.raises(RuntimeError, match=r"create the server with Elicitation.server\(...\)"):
            _ = app.mcp_server
        app.server("resources")
        with pytest.raises(TypeError, match="takes the resource's URI template"):
            app.resource("")
    finally:
        app.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"default_ttl": timedelta(0)}, "task TTLs must be positive"),
        ({"max_ttl": -timedelta(seconds=1)}, "task TTLs must be positive"),
        ({"poll_interval": timedelta(0)}, "poll interval must be positive"),
    ],
)
def test_task_lifetimes_and_the_poll_interval_must_be_positive(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TaskSettings(**settings)


def test_a_task_gets_the_ttl_asked_for_within_a_second_and_the_maximum() -> None:
    settings = TaskSettings(default_ttl=timedelta(hours=1), max_ttl=timedelta(hours=2))
    assert settings.ttl_for(None) == timedelta(hours=1)
    assert settings.ttl_for(10) == timedelta(seconds=1)
    assert settings.ttl_for(90 * 60 * 1000) == timedelta(minutes=90)
    assert settings.ttl_for(10**12) == timedelta(hours=2)


def test_a_decision_page_needs_the_public_base_url(tmp_path: Path) -> None:
    app = Elicitation(f"sqlite://{tmp_path / 'elicit.db'}", request_state=RequestState(single_process=True))
    try:
        with pytest.raises(RuntimeError, match=r"URL decisions need Elicitation\(public_base_url=\.\.\.\)"):
            app.decision_url("6f1c3a52-3b8e-4a57-9d35-0c1f8e2b7a10")
    finally:
        app.close()
