"""`mcp-elicit gateway` as a host runs it: a process on stdio in front of an upstream process, here with
`mcp-elicit call` for the host. What the relay does is tested in process (tests/wire/test_gateway*.py); here
the processes are the subject: the command's options, its stdio, and how it says it cannot start.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli_terminal import COMMAND
from tests.helpers.commands import command

ROOT = Path(__file__).resolve().parents[2]
SDK_SERVER = f"{shlex.quote(sys.executable)} -m tests.helpers.peers.sdk_server"
ONE_ERA = [sys.executable, "-m", "tests.helpers.peers.one_era_server"]


def run(*args: str, tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    env.update(COLUMNS="200", MCP_ELICIT_STORE=f"sqlite://{tmp_path / 'gateway.db'}", TMPDIR=str(tmp_path))
    env.update(variables)
    return command(args, env=env, timeout=120, cwd=ROOT)


def test_a_host_calls_a_tool_through_the_gateway_and_its_question_reaches_the_host(tmp_path: Path) -> None:
    script = tmp_path / "seats.json"
    script.write_text(json.dumps([{"match": "How many seats to Oslo?", "reply": "accept", "content": {"seats": 2}}]))
    # `book` asks with `elicitation/create` on the live call, which only a handshake session with the upstream has.
    gateway = shlex.join([COMMAND, "gateway", "--upstream", SDK_SERVER, "--era", "legacy"])
    called = run(
        "call", gateway, "book", "--arg", "city=Oslo", "--era", "2025-11-25", "--script", str(script), tmp_path=tmp_path
    )
    assert called.returncode == 0, called.stderr
    assert "booked 2 to Oslo" in called.stdout


def test_a_gateway_that_cannot_start_says_why_and_exits_2(tmp_path: Path) -> None:
    missing = run("gateway", "--upstream", "no-such-command-anywhere --port 1", tmp_path=tmp_path)
    assert missing.returncode == 2, missing.stderr
    assert (
        "error: upstream 'no-such-command-anywhere --port 1' could not be started: FileNotFoundError: [Errno 2] No "
        "such file or directory"
    ) in " ".join(missing.stderr.split())
    unparsed = run("gateway", "--upstream", "ftp://tools.example/mcp", tmp_path=tmp_path)
    assert unparsed.returncode == 2, unparsed.stderr
    assert "error: --upstream: 'ftp://tools.example/mcp': an upstream URL is http:// or https://" in unparsed.stderr


def test_an_http_gateway_without_sign_in_settings_names_each_missing_one_and_exits_2(tmp_path: Path) -> None:
    http = ("gateway", "--upstream", SDK_SERVER, "--transport", "streamable-http", "--host", "0.0.0.0")
    exposed = run(*http, "--public-url", "http://gateway.example", tmp_path=tmp_path)
    assert exposed.returncode == 2, exposed.stderr
    first, *listed = exposed.stderr.strip().splitlines()
    assert first == (
        "error: mcp-elicit gateway --transport streamable-http signs its clients in, and cannot start; fix 4 "
        "settings in its environment (or pass --dev-loopback to serve loopback without sign-in):"
    )
    assert [line.split()[1].rstrip(":") for line in listed] == [
        "the",  # the public URL, plain http outside loopback
        "MCP_ELICIT_USERS",
        "MCP_ELICIT_AUTH_KEYS",
        "MCP_ELICIT_STATE_KEYS",
    ]
    assert "http://gateway.example is plain http outside loopback" in listed[0]
    assert "MCP_ELICIT_VAULT_KEYS" not in exposed.stderr  # the gateway keeps no credentials
    partial = run(*http, "--public-url", "https://gateway.example", tmp_path=tmp_path, MCP_ELICIT_IDP_CLIENT_ID="web")
    assert partial.returncode == 2, partial.stderr
    _, *listed = partial.stderr.strip().splitlines()
    assert [line.split()[1].rstrip(":") for line in listed] == [  # an identity provider in place of the users
        "MCP_ELICIT_IDP_CLIENT_ID",
        "MCP_ELICIT_AUTH_KEYS",
        "MCP_ELICIT_STATE_KEYS",
    ]
    assert "names an identity provider only with MCP_ELICIT_IDP_ISSUER" in " ".join(listed[0].split())
    unsigned = run(*http, "--dev-loopback", tmp_path=tmp_path)
    assert unsigned.returncode == 2, unsigned.stderr
    assert (
        "error: --dev-loopback signs no one in: it listens on loopback only (127.0.0.1, ::1, localhost), not on "
        "0.0.0.0; without it the gateway signs its clients in"
    ) in " ".join(unsigned.stderr.split())


def test_a_config_file_relays_several_upstreams_each_under_its_prefix(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    sdk = f'[[upstream]]\nname = "sdk"\ncommand = {json.dumps(SDK_SERVER)}\n'
    one_era = f'[[upstream]]\nname = "one-era"\nprefix = "era"\ncommand = {json.dumps(ONE_ERA)}\n'
    config.write_text(f"{sdk}\n{one_era}cwd = {json.dumps(str(ROOT))}\n")
    gateway = shlex.join([COMMAND, "gateway", "--config", str(config)])
    echoed = run("call", gateway, "era_echo", "--arg", "to=era", tmp_path=tmp_path)
    assert echoed.returncode == 0, echoed.stderr
    assert '{"to": "era"}' in echoed.stdout


def test_a_config_that_cannot_work_is_said_before_anything_starts_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[[upstream]]\nname = "sdk"\ncommand = {json.dumps(SDK_SERVER)}\nsesions = 2\n')
    typo = run("gateway", "--config", str(config), tmp_path=tmp_path)
    assert typo.returncode == 2, typo.stderr
    assert (
        f"error: {config}: upstream[0].sesions: unknown key; expected one of: name, command, url, prefix, era, "
        "timeout, sessions, env, pass_env, cwd, credential"
    ) in " ".join(typo.stderr.split())
    config.write_text(f'[[upstream]]\nname = "sdk"\ncommand = {json.dumps(SDK_SERVER)}\n')
    both = run("gateway", "--upstream", SDK_SERVER, tmp_path=tmp_path, MCP_ELICIT_GATEWAY_CONFIG=str(config))
    assert both.returncode == 2, both.stderr
    assert (
        f"error: --upstream and the [[upstream]] tables of {config} (MCP_ELICIT_GATEWAY_CONFIG) both name "
        "upstreams: give --upstream, or the tables"
    ) in " ".join(both.stderr.split())
    described = run("gateway", "--config", str(config), "--era", "legacy", tmp_path=tmp_path)
    assert described.returncode == 2, described.stderr
    assert (
        f"error: --era describes --upstream; the [[upstream]] tables of {config} say it for each upstream (its key era)"
    ) in " ".join(described.stderr.split())
    config.write_text(
        f'[[upstream]]\nname = "sdk"\ncommand = {json.dumps(SDK_SERVER)}\n[[gate]]\ntool = "book"\nupstream = "skd"\n'
    )
    misnamed = run("gateway", "--config", str(config), tmp_path=tmp_path)
    assert misnamed.returncode == 2, misnamed.stderr
    assert f"error: {config}: gate[0].upstream: expected one of the upstreams (sdk), not 'skd'" in " ".join(
        misnamed.stderr.split()
    )


def test_a_credential_without_what_it_needs_is_refused_at_start_naming_the_key(tmp_path: Path) -> None:
    """A person connects a credential on the gateway's pages and it is kept in the vault: a gateway without sign-in, or
    without the vault's keys, or an OAuth client without its secret, cannot serve it and says so before it starts."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[[upstream]]\nname = "tickets"\nurl = "http://127.0.0.1:9/mcp"\n\n'
        '[upstream.credential]\nkind = "oauth"\nauthorize_url = "https://id.example/authorize"\n'
        'token_url = "https://id.example/token"\nclient_id = "gateway"\nclient_secret_env = "TICKETS_CLIENT_SECRET"\n'
    )
    stdio = run("gateway", "--config", str(config), tmp_path=tmp_path)
    assert stdio.returncode == 2, stdio.stderr
    assert (
        f"error: {config}: upstream[0].credential: each person connects it on the gateway's pages, which need its "
        "sign-in: serve the gateway with --transport streamable-http (without --dev-loopback)"
    ) in " ".join(stdio.stderr.split())
    signed_in = {
        "MCP_ELICIT_USERS": "alice:wonderland",
        "MCP_ELICIT_AUTH_KEYS": "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=",
        "MCP_ELICIT_STATE_KEYS": "U1NTU1NTU1NTU1NTU1NTU1NTU1NTU1NTU1NTU1NTU1M=",
    }
    http = ("gateway", "--config", str(config), "--transport", "streamable-http", "--port", "9")
    keyless = run(*http, tmp_path=tmp_path, **signed_in)
    assert keyless.returncode == 2, keyless.stderr
    assert "MCP_ELICIT_VAULT_KEYS is not set" in " ".join(keyless.stderr.split())
    vault = "v1:dmF1bHQta2V5LXZhdWx0LWtleS12YXVsdC1rZXktMDE="
    secretless = run(*http, tmp_path=tmp_path, **signed_in, MCP_ELICIT_VAULT_KEYS=vault)
    assert secretless.returncode == 2, secretless.stderr
    assert (
        f"error: {config}: upstream[0].credential.client_secret_env: expected the name of a variable set in the "
        "gateway's environment, with the client secret of tickets; TICKETS_CLIENT_SECRET is not set"
    ) in " ".join(secretless.stderr.split())
