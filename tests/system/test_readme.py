"""Every code block of README.md runs as written, or is marked `<!-- fragment -->` on the line before it.

Complete Python blocks run for real in a subprocess: a server block is started over stdio and a real SDK
client lists its tools and answers what they ask; a plain program runs against a store the test prepared.
Complete shell blocks run line by line with a fresh shell whose PATH lacks the virtual environment, and JSON
blocks are host configurations whose server is started and listed. Fragments are only syntax-checked.
"""

from __future__ import annotations

import ast
import base64
import inspect
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit.model import Principal
from mcp_elicit.reference.demo_stack import Credentials, DemoStack, sign_in
from mcp_elicit.store import open_store
from mcp_elicit.web import Vault, VaultKeyRing
from tests.helpers.http_harness import free_port, wait_for_port
from tests.helpers.person import Person, accept
from tests.helpers.results import text

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
VENV = Path(sys.executable).parent.parent
COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
FRAGMENT = "<!-- fragment -->"
TIMEOUT = 60
_OPENING = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    line: int
    lang: str
    code: str
    fragment: bool
    document: str = "README.md"

    def __str__(self) -> str:
        return f"{self.document}:{self.line} ({self.lang or 'no language'})"


def blocks(document: Path = README) -> list[Block]:
    lines = document.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _OPENING.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, start = opening["indent"], index
        index += 1
        body: list[str] = []
        while lines[index].strip() != "```":
            assert index + 1 < len(lines), f"{document.name}:{start + 1}: the code block is never closed"
            body.append(lines[index].removeprefix(indent))
            index += 1
        fragment = start > 0 and lines[start - 1].strip() == FRAGMENT
        found.append(Block(start + 1, opening["lang"], "\n".join(body) + "\n", fragment, document.name))
        index += 1
    return found


def complete(lang: str) -> list[Block]:
    return [block for block in blocks() if block.lang == lang and not block.fragment]


def test_the_readme_has_blocks_of_each_kind() -> None:
    assert len(complete("python")) >= 2 and complete("sh") and len(complete("json")) >= 2
    assert any(block.fragment for block in blocks())


@pytest.mark.parametrize("block", [b for b in blocks() if b.fragment], ids=str)
def test_fragment_parses(block: Block) -> None:
    parses(block)


@pytest.mark.parametrize("block", blocks(CONTRIBUTING), ids=str)
def test_the_contributing_page_shows_commands_that_parse(block: Block) -> None:
    """Its blocks run the suite itself, so they are shown, not run: each is a marked fragment that parses."""
    assert block.fragment, f"{block}: mark it {FRAGMENT}"
    parses(block)


def parses(block: Block) -> None:
    if block.lang == "python":
        compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    elif block.lang == "sh":
        checked = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{block}: {checked.stderr}"
    elif block.lang == "json":
        json.loads(block.code)


@pytest.mark.parametrize("block", [b for b in blocks() if not b.fragment], ids=str)
def test_unmarked_blocks_are_of_a_kind_the_test_runs(block: Block) -> None:
    assert block.lang in ("python", "sh", "json"), f"{block} is not run: mark it {FRAGMENT} or make it runnable"


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    return {**env, "MCP_ELICIT_STORE": f"sqlite://{tmp_path / 'readme.db'}", "XDG_DATA_HOME": str(tmp_path), **extra}


def b64_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


# -- complete Python blocks: each is recognized by what it defines, and run accordingly -------------------


async def run_stdio_server(path: Path, tmp_path: Path) -> None:
    """The tool-author example: started as written, its tool asked and answered on both eras."""
    env = environment(tmp_path, MCP_ELICIT_STATE_KEYS=f"{b64_key()},{b64_key()}")
    for era in ("legacy", "2026-07-28"):
        person = Person([accept(approve=True)])
        parameters = StdioServerParameters(command=sys.executable, args=[str(path)], env=env, cwd=str(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=person) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert tools == {"deploy"}, tools
                result = await client.call_tool("deploy", {"service": f"payments-{era}"})
        assert text(result) == "deployed"
        [question] = person.asked
        assert question.message == f"Deploy payments-{era} 2.4.0 to production (2 file changes)?"
        declined = Person([accept(approve=False)])
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=declined) as client:
                result = await client.call_tool("deploy", {"service": f"billing-{era}"})
        assert text(result) == "nothing changed"


async def run_fastmcp_server(path: Path, tmp_path: Path) -> None:
    """The FastMCP example: started over stdio as written, its flow tool asked and answered on both eras."""
    env = environment(tmp_path, MCP_ELICIT_STATE_KEYS=b64_key())
    for era in ("legacy", "2026-07-28"):
        person = Person([accept(confirm=True)])
        parameters = StdioServerParameters(command=sys.executable, args=[str(path)], env=env, cwd=str(tmp_path))
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters, mode=era, elicitation_callback=person) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert tools == {"rollback", "status"}, tools
                result = await client.call_tool("rollback", {"service": f"web-{era}"})
        assert text(result) == f"rolled back to web-{era} 2.3.9"
        [question] = person.asked
        assert question.message == f"Roll web-{era} back to web-{era} 2.3.9?"


def run_reseal(path: Path, tmp_path: Path) -> None:
    """The vault re-seal: an entry sealed under the old key comes out under the new one."""
    env = environment(tmp_path)
    old, new = f"old:{b64_key()}", f"new:{b64_key()}"
    alice = Principal("alice", "client-a")
    store = open_store(env["MCP_ELICIT_STORE"])
    try:
        Vault(store, VaultKeyRing.from_text(old)).put(alice, "github", "s3cret-token")
    finally:
        store.close()
    ran = subprocess.run(
        [sys.executable, str(path)],
        env={**env, "MCP_ELICIT_VAULT_KEYS": f"{new},{old}"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "re-sealed 1 entries; the older keys can go\n"
    store = open_store(env["MCP_ELICIT_STORE"])
    try:
        assert Vault(store, VaultKeyRing.from_text(new)).get(alice, "github") == "s3cret-token"
    finally:
        store.close()


async def run_http_server(path: Path, tmp_path: Path) -> None:
    """The sign-in example: served over HTTP on a free port, a user signs in, a real client calls and answers."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    alice = Credentials("alice", secrets.token_urlsafe(12), "Alice Liddell")
    env = environment(
        tmp_path,
        PORT=str(port),
        PUBLIC_URL=public,
        MCP_ELICIT_USERS=f"{alice.username}:{alice.password}:{alice.display_name}",
        MCP_ELICIT_STATE_KEYS=b64_key(),
        MCP_ELICIT_AUTH_KEYS=f"{b64_key()},{b64_key()}",
    )
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, str(path)], env=env, cwd=tmp_path, stdout=sink, stderr=sink)
    try:
        wait_for_port(port, process, timeout=TIMEOUT)
        stack = DemoStack(public, public, env["MCP_ELICIT_STORE"], tmp_path, alice, alice, log, log)
        with anyio.fail_after(TIMEOUT):
            token = await sign_in(stack)
        for era in ("legacy", "2026-07-28"):
            person = Person([accept(value="db")])
            with anyio.fail_after(TIMEOUT):
                async with (
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
                    Client(
                        streamable_http_client(f"{public}/mcp", http_client=http), mode=era, elicitation_callback=person
                    ) as client,
                ):
                    tools = {tool.name for tool in (await client.list_tools()).tools}
                    assert tools == {"page_oncall"}, tools
                    result = await client.call_tool("page_oncall", {"incident": f"disk-full-{era}"})
            assert text(result) == f"{public}#alice paged db about disk-full-{era}"
            [question] = person.asked
            assert question.message == f"Which team gets disk-full-{era}?"
        async with httpx2.AsyncClient(timeout=10) as http:
            refused = await http.post(f"{public}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode in (0, -15), log.read_text()


def run_plugin_tests(path: Path, tmp_path: Path) -> None:
    """The testing example: a test module run by pytest as written, the plugin loaded by its entry point."""
    module = tmp_path / "test_readme_example.py"
    module.write_text(path.read_text())
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-W", "error", module.name],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 3,
        check=False,
    )
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    summary = ran.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"=+ \d+ passed in [\d.]+s =+", summary), summary
    for era in ("2025-06-18", "2025-11-25", "2026-07-28"):
        assert f"[{era}] PASSED" in ran.stdout, f"nothing ran on {era}:\n{ran.stdout}"


RUNNERS: dict[str, Callable[[Path, Path], Any]] = {
    "async def deploy(flow: Flow": run_stdio_server,
    "Vault(store, ring).rotate()": run_reseal,
    "async def page_oncall(flow: Flow": run_http_server,
    "from mcp_elicit.testing import": run_plugin_tests,
    "FastMCPFlows(": run_fastmcp_server,
}


@pytest.mark.parametrize("block", complete("python"), ids=str)
def test_complete_python_block_runs(block: Block, tmp_path: Path) -> None:
    compile(block.code, str(block), "exec", dont_inherit=True)
    runners = [runner for marker, runner in RUNNERS.items() if marker in block.code]
    assert len(runners) == 1, f"{block}: no runner recognizes this block; add one to RUNNERS or mark it {FRAGMENT}"
    path = tmp_path / "block.py"
    path.write_text(block.code)
    runner = runners[0]
    if inspect.iscoroutinefunction(runner):
        anyio.run(runner, path, tmp_path)
    else:
        runner(path, tmp_path)


# -- complete shell blocks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block", complete("sh"), ids=str)
def test_complete_shell_block_runs(block: Block, tmp_path: Path) -> None:
    """Run from a directory holding `.venv`, with a PATH that does not hold it: the block must find the command."""
    (tmp_path / ".venv").symlink_to(VENV, target_is_directory=True)
    env = environment(tmp_path, PATH="/usr/bin:/bin")
    env.pop("VIRTUAL_ENV", None)
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, f"{block} failed:\n{ran.stdout}\n{ran.stderr}"
    if "mcp-elicit --version" in block.code:
        assert f"mcp-elicit {version('mcp-elicit')}\n" in ran.stdout


# -- JSON blocks: host configurations ------------------------------------------------------------------


def configured_servers(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    servers: dict[str, dict[str, Any]] = config.get("mcpServers") or config.get("servers") or {}
    return servers


@pytest.mark.anyio
@pytest.mark.parametrize("block", complete("json"), ids=str)
async def test_host_configuration_starts_the_server(block: Block, tmp_path: Path) -> None:
    servers = configured_servers(json.loads(block.code))
    assert servers, f"{block} configures no server"
    for name, entry in servers.items():
        assert entry.get("type", "stdio") == "stdio", f"{block}: {name} is not a stdio server"
        assert Path(entry["command"]).name == "mcp-elicit", f"{block}: {name} does not run mcp-elicit"
        configured_env: dict[str, str] = entry.get("env", {})
        assert set(configured_env) <= {"MCP_ELICIT_STORE"}, configured_env
        parameters = StdioServerParameters(
            command=COMMAND,  # the placeholder path, resolved to this environment's command
            args=[*entry["args"], "--workspace", str(tmp_path / "workspace")],
            env=environment(tmp_path),
        )
        with anyio.fail_after(TIMEOUT):
            async with Client(parameters) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"deploy", "procure", "delete_files", "create_ticket"} <= tools
