"""`mcp-elicit install`'s pure parts: where each host keeps its file on each system, how an entry looks, how
the file is merged, and which store URLs and settings may go into it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

import pytest

from mcp_elicit.cli.install import (
    Host,
    InstallError,
    Scope,
    config_path,
    entry,
    merged,
    secret_name,
    server_command,
    store_url,
)

LINUX_HOME = PurePosixPath("/home/ada")
MAC_HOME = PurePosixPath("/Users/ada")
WINDOWS_HOME = PureWindowsPath("C:/Users/ada")
ROAMING = "C:\\Users\\ada\\AppData\\Roaming"
PROJECT = PurePosixPath("/src/shop")


def where(host: Host, scope: Scope, system: str, environ: dict[str, str] | None = None) -> PurePath:
    home = {"linux": LINUX_HOME, "darwin": MAC_HOME, "win32": WINDOWS_HOME}[system]
    project = PureWindowsPath("C:/src/shop") if system == "win32" else PROJECT
    return config_path(host, scope, system=system, environ=environ or {}, home=home, project=project)


@pytest.mark.parametrize(
    ("host", "system", "environ", "expected"),
    [
        (Host.CLAUDE_DESKTOP, "darwin", {}, "/Users/ada/Library/Application Support/Claude/claude_desktop_config.json"),
        (Host.CLAUDE_DESKTOP, "win32", {"APPDATA": ROAMING}, f"{ROAMING}\\Claude\\claude_desktop_config.json"),
        (Host.CLAUDE_DESKTOP, "linux", {}, "/home/ada/.config/Claude/claude_desktop_config.json"),
        (Host.CLAUDE_DESKTOP, "linux", {"XDG_CONFIG_HOME": "/cfg"}, "/cfg/Claude/claude_desktop_config.json"),
        (Host.CLAUDE_CODE, "linux", {}, "/home/ada/.claude.json"),
        (Host.CLAUDE_CODE, "darwin", {}, "/Users/ada/.claude.json"),
        (Host.CLAUDE_CODE, "win32", {"APPDATA": ROAMING}, "C:\\Users\\ada\\.claude.json"),
        (Host.VSCODE, "linux", {}, "/home/ada/.config/Code/User/mcp.json"),
        (Host.VSCODE, "darwin", {}, "/Users/ada/Library/Application Support/Code/User/mcp.json"),
        (Host.VSCODE, "win32", {"APPDATA": ROAMING}, f"{ROAMING}\\Code\\User\\mcp.json"),
        (Host.VSCODE, "win32", {}, "C:\\Users\\ada\\AppData\\Roaming\\Code\\User\\mcp.json"),
        (Host.CURSOR, "linux", {}, "/home/ada/.cursor/mcp.json"),
        (Host.CURSOR, "win32", {"APPDATA": ROAMING}, "C:\\Users\\ada\\.cursor\\mcp.json"),
    ],
)
def test_each_host_keeps_its_user_file_where_its_documentation_says(
    host: Host, system: str, environ: dict[str, str], expected: str
) -> None:
    assert str(where(host, Scope.USER, system, environ)) == expected


def test_project_files_sit_in_the_project_and_claude_desktop_has_none() -> None:
    assert str(where(Host.CLAUDE_CODE, Scope.PROJECT, "linux")) == "/src/shop/.mcp.json"
    assert str(where(Host.VSCODE, Scope.PROJECT, "linux")) == "/src/shop/.vscode/mcp.json"
    assert str(where(Host.CURSOR, Scope.PROJECT, "win32")) == "C:\\src\\shop\\.cursor\\mcp.json"
    with pytest.raises(InstallError, match="claude-desktop has no project configuration; use --scope user"):
        where(Host.CLAUDE_DESKTOP, Scope.PROJECT, "darwin")


def test_vscode_and_claude_code_entries_say_their_type() -> None:
    assert entry(Host.VSCODE, "/venv/bin/mcp-elicit", ["serve"], {"A": "1"}) == {
        "type": "stdio",
        "command": "/venv/bin/mcp-elicit",
        "args": ["serve"],
        "env": {"A": "1"},
    }
    assert "type" in entry(Host.CLAUDE_CODE, "c", [], {})
    assert "type" not in entry(Host.CLAUDE_DESKTOP, "c", [], {})
    assert "type" not in entry(Host.CURSOR, "c", [], {})


def test_merging_keeps_every_other_server_and_setting() -> None:
    existing = json.dumps({"theme": "dark", "mcpServers": {"files": {"command": "fs"}}, "projects": {"/x": {}}})
    text = merged(existing, Host.CLAUDE_CODE, "mcp-elicit", {"command": "me"}, force=False, where="f")
    assert json.loads(text) == {
        "theme": "dark",
        "mcpServers": {"files": {"command": "fs"}, "mcp-elicit": {"command": "me"}},
        "projects": {"/x": {}},
    }
    assert json.loads(merged(None, Host.VSCODE, "n", {"command": "me"}, force=False, where="f")) == {
        "servers": {"n": {"command": "me"}}
    }


def test_an_entry_of_the_same_name_is_replaced_only_when_forced() -> None:
    existing = json.dumps({"servers": {"mcp-elicit": {"command": "old"}, "other": {"command": "o"}}})
    with pytest.raises(InstallError, match='f already has a server named "mcp-elicit"; pass --force'):
        merged(existing, Host.VSCODE, "mcp-elicit", {"command": "new"}, force=False, where="f")
    forced = json.loads(merged(existing, Host.VSCODE, "mcp-elicit", {"command": "new"}, force=True, where="f"))
    assert forced == {"servers": {"mcp-elicit": {"command": "new"}, "other": {"command": "o"}}}


@pytest.mark.parametrize(
    ("existing", "problem"),
    [
        ('{"servers": {} // mine\n}', r"f is not plain JSON \(Expecting ',' delimiter at line 1, column 16\)"),
        ("[1, 2]", "f holds a JSON list, not an object"),
        ('{"servers": [1]}', 'f: "servers" is a JSON list, not an object'),
    ],
)
def test_a_file_that_cannot_be_merged_is_refused_with_its_problem(existing: str, problem: str) -> None:
    with pytest.raises(InstallError, match=problem):
        merged(existing, Host.VSCODE, "n", {}, force=False, where="f")


def test_store_urls_become_absolute_and_never_carry_a_password(tmp_path: Path) -> None:
    assert store_url("sqlite:data/elicit.db", tmp_path) == f"sqlite://{tmp_path}/data/elicit.db"
    assert store_url("sqlite:///var/elicit.db?synchronous=full", tmp_path) == "sqlite:///var/elicit.db?synchronous=full"
    assert store_url("postgresql://app@db/elicit", tmp_path) == "postgresql://app@db/elicit"
    assert store_url("sqlite:with space.db", tmp_path) == f"sqlite://{tmp_path}/with%20space.db"
    with pytest.raises(InstallError, match="unknown SQLite URL parameter 'mode'"):
        store_url("sqlite:///var/elicit.db?mode=ro", tmp_path)
    with pytest.raises(InstallError, match="unknown store URL scheme 'mysql': use sqlite:///"):
        store_url("mysql://root:hunter2@db/elicit", tmp_path)
    for url in ("postgresql://app:hunter2@db/elicit", "postgresql://app@db/elicit?password=hunter2"):
        with pytest.raises(InstallError, match="carries a password") as refused:
            store_url(url, tmp_path)
        assert "hunter2" not in str(refused.value)


def test_secrets_are_named_by_setting_or_variable() -> None:
    assert secret_name("webhook_secret") == "webhook_secret"
    assert secret_name("MCP_ELICIT_WEBHOOK_URL") == "webhook_url"
    with pytest.raises(InstallError, match="--secret store: not a secret setting; the secrets are audit_keys, "):
        secret_name("store")


def test_a_given_server_command_gets_absolute_paths_a_host_can_start(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text("")
    assert server_command("python server.py --port 1", tmp_path) == [sys.executable, str(script), "--port", "1"]
    assert server_command("python3 missing.py", tmp_path) == [sys.executable, "missing.py"]
    assert server_command("sh -c 'exit 0'", tmp_path) == [shutil.which("sh"), "-c", "exit 0"]
    assert server_command(None, tmp_path)[-1] == "serve"
    assert Path(server_command("mcp-elicit serve", tmp_path)[0]).is_absolute()
    for given, problem in (
        ("no-such-program-here serve", "--server: 'no-such-program-here' is not a command here"),
        ("./server.py", r"--server: './server.py' is not a command here; give the path of a program"),
        ("", "--server is empty"),
        ("python 'server.py", "cannot be split into words: No closing quotation"),
    ):
        with pytest.raises(InstallError, match=problem):
            server_command(given, tmp_path)
