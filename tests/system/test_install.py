"""`mcp-elicit install HOST` as a person runs it, into a home directory of the test's own; then the server each
written file describes, started exactly as its host starts it: the command, arguments, environment and
directory of the entry, on top of the few variables a host passes on (the SDK's stdio client does the same),
listed through the SDK's client. Also: the backup and merge, `--force`, `--print`, and secrets kept out of
the host's JSON.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers.cli_terminal import COMMAND

REFERENCE_TOOLS = {"deploy", "procure", "delete_files", "create_ticket"}
SECRET = "whsec_" + "c2VjcmV0LXNpZ25pbmcta2V5LW9mLXRoZS10ZXN0"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home of the test's own: the hosts' files, the store and the secrets all land under it. The
    test process's HOME is it too, since a host passes its HOME on to the servers it starts."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "APPDATA"):
        monkeypatch.delenv(name, raising=False)
    return home


def install(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MCP_ELICIT_")}
    return subprocess.run(
        [COMMAND, "install", *args],
        cwd=cwd,
        env={**environ, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def servers_of(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    found: dict[str, Any] = document.get("mcpServers") or document["servers"]
    return found


async def tools_started_as_the_host_does(server: dict[str, Any]) -> set[str]:
    parameters = StdioServerParameters(
        command=server["command"], args=server["args"], env=server.get("env"), cwd=server.get("cwd")
    )
    with anyio.fail_after(60):
        async with Client(parameters) as client:
            return {tool.name for tool in (await client.list_tools()).tools}


@pytest.mark.anyio
async def test_each_host_gets_a_server_that_starts_as_it_would_start_it(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    runs = {
        "claude-desktop": ((), home / ".config/Claude/claude_desktop_config.json"),
        "vscode": ((), home / ".config/Code/User/mcp.json"),
        "claude-code": (("--scope", "project"), project / ".mcp.json"),
        "cursor": (("--scope", "project", "--project", str(project)), project / ".cursor/mcp.json"),
    }
    written: dict[str, dict[str, Any]] = {}
    for host, (options, path) in runs.items():
        ran = install(host, *options, cwd=project)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == f'{host}: server "mcp-elicit" written to {path}\n'
        written[host] = servers_of(path)["mcp-elicit"]
    key_file = home / ".local/share/mcp-elicit/secrets/state-keys"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((project / ".mcp.json").stat().st_mode) == 0o644
    assert stat.S_IMODE(runs["vscode"][1].stat().st_mode) == 0o600
    for host, server in written.items():
        assert Path(server["command"]).is_absolute(), server
        assert server["args"] == ["serve"]
        assert server["env"] == {
            "MCP_ELICIT_STORE": f"sqlite://{home}/.local/share/mcp-elicit/elicit.db",
            "MCP_ELICIT_STATE_KEYS_FILE": str(key_file),  # one key ring for every host: made once, then kept
        }, host
        assert ("type" in server) == (host in ("vscode", "claude-code")), host
    for host in ("claude-desktop", "vscode"):  # one of each shape: "mcpServers" and "servers"
        assert await tools_started_as_the_host_does(written[host]) >= REFERENCE_TOOLS, host


def test_an_existing_file_is_backed_up_and_merged_and_its_entry_replaced_only_when_forced(
    home: Path, tmp_path: Path
) -> None:
    path = home / ".cursor/mcp.json"
    path.parent.mkdir()
    before = {"mcpServers": {"files": {"command": "/usr/bin/fs"}, "mcp-elicit": {"command": "old"}}, "x": 1}
    path.write_text(json.dumps(before))
    path.chmod(0o640)

    refused = install("cursor", cwd=tmp_path)
    assert refused.returncode == 2
    assert f'error: {path} already has a server named "mcp-elicit"; pass --force to replace it' in refused.stderr
    assert json.loads(path.read_text()) == before
    assert list(path.parent.iterdir()) == [path]

    shown = install("cursor", "--print", "--force", "--name", "mcp-elicit", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    printed = json.loads(shown.stdout)["mcpServers"]["mcp-elicit"]
    assert printed["args"] == ["serve"]
    assert f"not written: --print; the entry goes to {path}" in shown.stderr
    assert json.loads(path.read_text()) == before
    assert list(path.parent.iterdir()) == [path]
    assert not (home / ".local/share/mcp-elicit/secrets").exists()

    forced = install("cursor", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    [backup] = [p for p in path.parent.iterdir() if p != path]
    assert backup.name.startswith("mcp.json.") and backup.name.endswith("Z.bak")
    assert json.loads(backup.read_text()) == before
    assert f"backed up {path} to {backup}" in forced.stderr
    after = json.loads(path.read_text())
    assert after["x"] == 1 and after["mcpServers"]["files"] == {"command": "/usr/bin/fs"}
    assert after["mcpServers"]["mcp-elicit"] == printed
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_secrets_go_to_private_files_never_into_the_hosts_json(home: Path, tmp_path: Path) -> None:
    path = home / ".config/Claude/claude_desktop_config.json"
    ran = install(
        "claude-desktop", "--secret", "webhook_secret", cwd=tmp_path, env={"MCP_ELICIT_WEBHOOK_SECRET": SECRET}
    )
    assert ran.returncode == 0, ran.stderr
    assert SECRET not in path.read_text()
    secret_file = Path(servers_of(path)["mcp-elicit"]["env"]["MCP_ELICIT_WEBHOOK_SECRET_FILE"])
    assert secret_file.read_text() == SECRET + "\n"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    shared = tmp_path / "webhook-secret"
    shared.write_text(SECRET)
    shared.chmod(0o644)
    refused = install(
        "vscode",
        "--secret",
        "MCP_ELICIT_WEBHOOK_SECRET",
        cwd=tmp_path,
        env={"MCP_ELICIT_WEBHOOK_SECRET_FILE": str(shared)},
    )
    assert refused.returncode == 2
    assert f"error: MCP_ELICIT_WEBHOOK_SECRET_FILE: others may open {shared} (mode 0644); make it" in refused.stderr
    assert not (home / ".config/Code").exists()

    shared.chmod(0o600)
    accepted = install(
        "vscode", "--secret", "webhook_secret", cwd=tmp_path, env={"MCP_ELICIT_WEBHOOK_SECRET_FILE": str(shared)}
    )
    assert accepted.returncode == 0, accepted.stderr
    assert servers_of(home / ".config/Code/User/mcp.json")["mcp-elicit"]["env"][
        "MCP_ELICIT_WEBHOOK_SECRET_FILE"
    ] == str(shared)

    for options, problem in (
        (("--env", f"MCP_ELICIT_WEBHOOK_SECRET={SECRET}"), "a secret never goes into the host's JSON"),
        (("--store", f"postgresql://app:{SECRET}@db/elicit"), "the store URL carries a password"),
    ):
        refused = install("cursor", *options, cwd=tmp_path)
        assert refused.returncode == 2 and problem in refused.stderr, refused.stderr
        assert SECRET not in refused.stderr + refused.stdout
    assert not (home / ".cursor").exists()
