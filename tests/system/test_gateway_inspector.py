"""The MCP Inspector's CLI as the host of `mcp-elicit gateway`: it launches the gateway over stdio in front of the
TypeScript reference server (`server-everything`), as it would launch any server, lists the tools and calls one
through it, and ends it. It answers no questions, so a call of a gated tool ends with the gateway's own error saying
the client cannot be asked, and the upstream never gets it. Both Node.js tools are pinned and installed by `make tools`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

from tests.helpers.cli_terminal import COMMAND
from tests.helpers.gateway import everything, inspector_cli


def inspect(tmp_path: Path, *request: str) -> subprocess.CompletedProcess[str]:
    """The Inspector's CLI making one `request` (its options) of a gateway it starts, whose config gates `get-sum`;
    the upstream writes its process id to `upstream.pid` (`outlived`).

    The Inspector starts a stdio server with a few variables of its own environment only (`HOME`, `PATH`, ...): what
    the gateway needs besides its arguments goes with `-e`, the test run's module path too where it sets one."""
    config = tmp_path / "gateway.toml"
    config.write_text('[[gate]]\ntool = "get-sum"\n')
    passed = [f"MCP_ELICIT_GATEWAY_CONFIG={config}"]
    if "PYTHONPATH" in os.environ:
        passed.append(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    # Its error output goes to a file, not to the Inspector's: the run ends when the Inspector does.
    noted = ["sh", "-c", 'echo $$ > "$0"; exec "$@" 2>/dev/null', str(tmp_path / "upstream.pid")]
    upstream = shlex.join([*noted, *everything().command])
    gateway = [COMMAND, "gateway", "--store", f"sqlite://{tmp_path / 'gateway.db'}", "--upstream", upstream]
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    env["HOME"] = str(tmp_path)  # where the Inspector would keep its catalog of servers
    return subprocess.run(
        [*inspector_cli(), *(part for variable in passed for part in ("-e", variable)), *request, "--", *gateway],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
        cwd=tmp_path,
    )


def outlived(tmp_path: Path) -> bool:
    """Whether the upstream process of the last `inspect` outlived the gateway; ended here if so, so that a failing
    test leaves nothing running."""
    try:
        os.kill(int((tmp_path / "upstream.pid").read_text()), signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def test_the_inspector_cli_lists_the_upstreams_tools_through_the_gateway_and_calls_one(tmp_path: Path) -> None:
    """Each time, the Inspector ends the gateway as the TypeScript SDK's client does (its input closed, SIGTERM 2 s
    later): the gateway has stopped the upstream by then, whose timers would keep it running on its own."""
    listed = inspect(tmp_path, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["tools"]}
    assert {"echo", "get-sum"} <= names
    assert not outlived(tmp_path)
    echoed = inspect(tmp_path, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=relayed")
    assert echoed.returncode == 0, echoed.stderr
    assert json.loads(echoed.stdout)["content"] == [{"type": "text", "text": "Echo: relayed"}]
    assert not outlived(tmp_path)


def test_a_gated_call_from_the_inspector_cli_which_answers_nothing_fails_with_the_gateways_error(
    tmp_path: Path,
) -> None:
    refused = inspect(tmp_path, "--method", "tools/call", "--tool-name", "get-sum", "--tool-arg", "a=2", "b=3")
    assert refused.returncode != 0, refused.stdout
    result = json.loads(refused.stdout)
    assert result["isError"] is True
    [said] = [block["text"] for block in result["content"]]
    assert said.startswith("This tool needs to ask something (form elicitation), but this client cannot receive")
    assert "The sum" not in refused.stdout  # never forwarded
