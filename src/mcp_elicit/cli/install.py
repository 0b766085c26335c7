"""`mcp-elicit install HOST`: write an MCP host's configuration so that it starts this server over stdio.

A host reads one JSON file (per user, or per project where it has both) listing the servers it starts: the
command, its arguments and its environment. Hosts do not read the shell's `PATH` or `.venv`, so the entry
names the command by its absolute path, this environment's `mcp-elicit` script (or, for `--server`, the
command given, resolved the same way), and the store by an absolute URL: the host then serves the very
store that `mcp-elicit decisions` reads here.

Secrets never go into the host's JSON, which hosts keep readable and sync, and people paste into issues.
A secret reaches the server as a `MCP_ELICIT_<NAME>_FILE` setting naming a file only this user can read:
the state key ring (generated once, shared by every host so configured, so a 2026-07-28 round outlives a
restart of the server) and, with `--secret NAME`, any other secret of this shell's environment.

The existing file is read, checked and copied aside (a timestamped `.bak` beside it) before anything is
written; the other servers in it, and everything else it holds, stay as they were. The new file replaces
the old in one rename.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Annotated, Any, Final, NoReturn
from urllib.parse import parse_qs, quote, urlsplit

import typer
from rich.console import Console
from rich.markup import escape

from mcp_elicit.settings import PREFIX, SECRETS, variable
from mcp_elicit.store import ENV_VAR, StoreConfigError, default_store_path, default_store_url
from mcp_elicit.store.sqlite import Synchronous
from mcp_elicit.store.url import sqlite_url

DEFAULT_NAME: Final = "mcp-elicit"
NOTHING_WRITTEN: Final = 2
"""The exit code when nothing was written (bad arguments, a file that cannot be merged, an unsafe secret file)."""
STATE_KEYS_FILE: Final = "state-keys"
_PYTHONS: Final = frozenset({"python", "python3", f"python3.{sys.version_info.minor}"})
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


class Host(StrEnum):
    CLAUDE_DESKTOP = "claude-desktop"
    CLAUDE_CODE = "claude-code"
    VSCODE = "vscode"
    CURSOR = "cursor"


class Scope(StrEnum):
    USER = "user"
    PROJECT = "project"


@dataclass(frozen=True, slots=True)
class HostFormat:
    """How a host's file lists its servers: under which key, whether an entry says `"type": "stdio"`, and
    whether the host has a project scope beside the user's."""

    servers_key: str
    typed: bool
    project_scope: bool


FORMATS: Final = {
    Host.CLAUDE_DESKTOP: HostFormat("mcpServers", typed=False, project_scope=False),
    Host.CLAUDE_CODE: HostFormat("mcpServers", typed=True, project_scope=True),
    Host.VSCODE: HostFormat("servers", typed=True, project_scope=True),
    Host.CURSOR: HostFormat("mcpServers", typed=False, project_scope=True),
}


class InstallError(Exception):
    """Why nothing was written, in a sentence saying what to do."""


def config_path(
    host: Host, scope: Scope, *, system: str, environ: Mapping[str, str], home: PurePath, project: PurePath
) -> PurePath:
    """The file `host` reads for `scope` on `system` (`sys.platform`: linux, darwin, win32), where each host's
    documentation puts it. Claude Desktop has no Linux release; its Linux builds read the XDG config dir."""
    if scope is Scope.PROJECT:
        if not FORMATS[host].project_scope:
            raise InstallError(f"{host} has no project configuration; use --scope user")
        return (
            project
            / {
                Host.CLAUDE_CODE: ".mcp.json",
                Host.VSCODE: ".vscode/mcp.json",
                Host.CURSOR: ".cursor/mcp.json",
            }[host]
        )
    if host is Host.CLAUDE_CODE:
        return home / ".claude.json"
    if host is Host.CURSOR:
        return home / ".cursor" / "mcp.json"
    app_dir = _app_config_dir(system, environ, home)
    if host is Host.CLAUDE_DESKTOP:
        return app_dir / "Claude" / "claude_desktop_config.json"
    return app_dir / "Code" / "User" / "mcp.json"


def _app_config_dir(system: str, environ: Mapping[str, str], home: PurePath) -> PurePath:
    if system == "win32":
        return PureWindowsPath(environ.get("APPDATA") or home / "AppData" / "Roaming")
    if system == "darwin":
        return home / "Library" / "Application Support"
    return PurePosixPath(environ.get("XDG_CONFIG_HOME") or home / ".config")


def entry(host: Host, command: str, args: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """One server's entry in `host`'s file."""
    shape: dict[str, Any] = {"type": "stdio"} if FORMATS[host].typed else {}
    return {**shape, "command": command, "args": list(args), "env": dict(env)}


def merged(existing: str | None, host: Host, name: str, server: Mapping[str, Any], *, force: bool, where: str) -> str:
    """The file's new text: `existing` (None: no file yet) with `server` as its entry `name`, all else kept."""
    key = FORMATS[host].servers_key
    document: Any = {}
    if existing is not None and existing.strip():
        try:
            document = json.loads(existing)
        except json.JSONDecodeError as error:
            raise InstallError(
                f"{where} is not plain JSON ({error.msg} at line {error.lineno}, column {error.colno}); "
                "fix it, or add the entry by hand (comments in it cannot be kept)"
            ) from None
    if not isinstance(document, dict):
        raise InstallError(f"{where} holds a JSON {type(document).__name__}, not an object; fix it first")
    servers = document.setdefault(key, {})
    if not isinstance(servers, dict):
        raise InstallError(f'{where}: "{key}" is a JSON {type(servers).__name__}, not an object; fix it first')
    if name in servers and not force:
        raise InstallError(
            f'{where} already has a server named "{name}"; pass --force to replace it (the file is backed up '
            "first), or --name to add another"
        )
    servers[name] = dict(server)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def store_url(given: str | None, cwd: Path) -> str:
    """The store the host's server opens: absolute (a host starts it in a directory of its choosing), with
    no password (it would sit in the host's JSON)."""
    url = given or default_store_url()
    scheme = url.partition(":")[0].lower()
    if scheme == "sqlite":
        try:
            parsed = sqlite_url(url)
        except StoreConfigError as error:
            raise InstallError(str(error)) from None
        pressed = "" if parsed.synchronous is Synchronous.NORMAL else f"?synchronous={parsed.synchronous.value}"
        return f"sqlite://{quote(str(cwd / parsed.path))}{pressed}"
    if scheme not in ("postgresql", "postgres"):
        raise InstallError(
            f"unknown store URL scheme {scheme!r}: use sqlite:///path/to/file.db or postgresql://user@host/db"
        )
    parts = urlsplit(url)
    if parts.password or "password" in parse_qs(parts.query):
        raise InstallError(
            "the store URL carries a password, which would be written into the host's JSON; keep it in "
            "~/.pgpass (or the file PGPASSFILE names, passed with --env PGPASSFILE=PATH) and leave it out of the URL"
        )
    return url


def server_command(given: str | None, cwd: Path) -> list[str]:
    """The command the host runs, its program an absolute path: `mcp-elicit serve` of this environment,
    or `given` split as a shell would, with `python` meaning this environment's interpreter and arguments
    that name existing files made absolute."""
    if given is None:
        return [*this_command(), "serve"]
    try:
        words = shlex.split(given)
    except ValueError as error:
        raise InstallError(f"--server {given!r} cannot be split into words: {error}") from None
    if not words:
        raise InstallError("--server is empty; give the command that starts your server")
    program, *args = words
    if program in _PYTHONS:
        resolved = [sys.executable]
    elif program == DEFAULT_NAME:
        resolved = this_command()
    else:
        named = "/" in program or os.sep in program
        found = str(cwd / program) if named else shutil.which(program)
        if found is None or not os.access(found, os.X_OK) or not Path(found).is_file():
            raise InstallError(f"--server: {program!r} is not a command here; give the path of a program")
        resolved = [str(Path(found).absolute())]
    return [*resolved, *(str(cwd / arg) if not arg.startswith("-") and (cwd / arg).exists() else arg for arg in args)]


def this_command() -> list[str]:
    """This environment's `mcp-elicit` script by its absolute path, else its interpreter with `-m`."""
    scripts = Path(sys.executable).parent
    for candidate in (Path(sys.argv[0]), scripts / "mcp-elicit", scripts / "mcp-elicit.exe"):
        if candidate.stem == DEFAULT_NAME and candidate.is_file():
            return [str(candidate.absolute())]
    return [sys.executable, "-m", "mcp_elicit"]


def secret_name(given: str) -> str:
    """The setting `given` names (`webhook_secret`, or its variable `MCP_ELICIT_WEBHOOK_SECRET`), a secret."""
    name = given.removeprefix(PREFIX).lower() if given.upper().startswith(PREFIX) else given.lower()
    if name not in SECRETS:
        known = ", ".join(sorted(SECRETS))
        raise InstallError(f"--secret {given}: not a secret setting; the secrets are {known}")
    return name


def private_file_problem(path: Path) -> str | None:
    """Why `path` cannot hold a secret for the host's server: missing, or open to anyone but this user."""
    try:
        found = path.stat()
    except OSError as error:
        return f"{path} cannot be read: {error.strerror or error}"
    if os.name != "posix":
        return None
    if found.st_uid != os.getuid():
        return f"{path} belongs to another user; a secret file must be this user's own"
    if found.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        mode = stat.S_IMODE(found.st_mode)
        return f"others may open {path} (mode {mode:04o}); make it this user's alone: chmod 600 {path}"
    return None


@dataclass(frozen=True, slots=True)
class SecretFile:
    """A `_FILE` setting of the entry: the file, and the text to create it with if it is to be written."""

    setting: str
    path: Path
    text: str | None = None


def secret_files(
    names: Sequence[str], directory: Path, environ: Mapping[str, str], *, state_keys: bool
) -> list[SecretFile]:
    """The secret files the entry names: the state key ring's (kept if there, else made), and each secret of
    `names` from this environment, its own `_FILE` if it uses one, else its value, to be written to `directory`."""
    found: list[SecretFile] = []
    wanted = [secret_name(name) for name in names]
    if state_keys and "state_keys" not in wanted:
        path = directory / STATE_KEYS_FILE
        key = None if path.exists() else base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
        found.append(SecretFile("state_keys", path, None if key is None else key + "\n"))
    for name in dict.fromkeys(wanted):
        named = (environ.get(variable(name) + "_FILE") or "").strip()
        value = (environ.get(variable(name)) or "").strip()
        if named:
            found.append(SecretFile(name, Path(named).absolute()))
        elif value:
            found.append(SecretFile(name, directory / name.replace("_", "-"), value + "\n"))
        else:
            raise InstallError(
                f"--secret {name}: set {variable(name)} (or {variable(name)}_FILE) in this shell; its value goes to "
                f"a file only you can read, never into the host's JSON"
            )
    for secret in found:
        if secret.text is None and (problem := private_file_problem(secret.path)) is not None:
            raise InstallError(f"{variable(secret.setting)}_FILE: {problem}")
    return found


def write_secret(secret: SecretFile) -> None:
    """Write the secret's file from its text, mode 0600 from its first byte, in a directory made 0700."""
    assert secret.text is not None
    secret.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    replace(secret.path, secret.text, mode=0o600)


def backup(path: Path, now: datetime) -> Path:
    """Copy `path` aside as `NAME.YYYYMMDDTHHMMSSZ.bak` (a counter added if that exists), mode kept."""
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1, 1000):
        copy = path.with_name(f"{path.name}.{stamp}{'' if attempt == 1 else f'-{attempt}'}.bak")
        try:
            with path.open("rb") as source, open(copy, "xb") as target:
                shutil.copyfileobj(source, target)
        except FileExistsError:
            continue
        shutil.copymode(path, copy)
        return copy
    raise InstallError(f"too many backups of {path} named {stamp}; remove some")


def replace(path: Path, text: str, *, mode: int) -> None:
    """Write `text` to `path` in one rename, so that the host never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as opened:
            opened.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _extra_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise InstallError(f"--env {pair!r}: give NAME=VALUE")
        if key.upper().startswith(PREFIX) and key.upper().removeprefix(PREFIX).lower() in SECRETS:
            setting = key.upper().removeprefix(PREFIX).lower()
            raise InstallError(f"--env {key}: a secret never goes into the host's JSON; pass --secret {setting}")
        env[key] = value
    return env


def install(
    host: Annotated[Host, typer.Argument(help="The MCP host to configure.", show_default=False)],
    scope: Annotated[
        Scope, typer.Option(help="user: every project of this user; project: the project directory's own file.")
    ] = Scope.USER,
    project: Annotated[
        Path | None, typer.Option(help="--scope project: the project's directory (default: the current one).")
    ] = None,
    name: Annotated[str, typer.Option(help="The server's name in the host's file.")] = DEFAULT_NAME,
    server: Annotated[
        str | None,
        typer.Option(help='The command the host runs, split like a shell (default: "mcp-elicit serve").'),
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", envvar=ENV_VAR, help="Store URL; default: the embedded SQLite file.")
    ] = None,
    secret: Annotated[
        list[str] | None,
        typer.Option(help="A secret setting (webhook_secret, ...) from this shell, passed as a private file."),
    ] = None,
    env: Annotated[list[str] | None, typer.Option(help="NAME=VALUE for the server's environment (no secrets).")] = None,
    state_keys: Annotated[
        bool, typer.Option(help="Give the server a state key ring in a private file (made once, then kept).")
    ] = True,
    secrets_dir: Annotated[
        Path | None, typer.Option(help="Where secret files are made (default: beside the default store, secrets/).")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="Write this file instead of the host's own.")] = None,
    force: Annotated[bool, typer.Option(help="Replace an entry of the same name.")] = False,
    print_only: Annotated[bool, typer.Option("--print", help="Show the entry; write nothing.")] = False,
) -> None:
    """Configure an MCP host (Claude Desktop, Claude Code, VS Code, Cursor) to start this server over stdio.

    The file is the one the host documents for this system; an existing one is backed up (NAME.TIMESTAMP.bak)
    and keeps its other servers. Secrets go to files only you can read, never into the host's JSON.
    Exit codes: 0 written (or printed), 2 nothing written, with the reason.
    """
    cwd = Path.cwd()
    try:
        target = config or Path(
            config_path(
                host,
                scope,
                system=sys.platform,
                environ=os.environ,
                home=Path.home(),
                project=(project or cwd).absolute(),
            )
        )
        directory = (secrets_dir or default_store_path().parent / "secrets").absolute()
        files = secret_files(secret or [], directory, os.environ, state_keys=state_keys)
        settings = {ENV_VAR: store_url(store, cwd)}
        settings.update({f"{variable(file.setting)}_FILE": str(file.path) for file in files})
        settings.update(_extra_env(env or []))
        command, *args = server_command(server, cwd)
        configured = entry(host, command, args, settings)
        existing = target.read_text(encoding="utf-8") if target.exists() else None
        text = merged(existing, host, name, configured, force=force, where=str(target))
    except InstallError as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"{error.filename or 'a file'} cannot be read: {error.strerror or error}")
    if print_only:
        typer.echo(json.dumps({FORMATS[host].servers_key: {name: configured}}, indent=2, ensure_ascii=False))
        typer.echo(f"not written: --print; the entry goes to {target}", err=True)
        for file in files:
            if file.text is not None:
                typer.echo(f"would write {file.path} (mode 600) for {variable(file.setting)}_FILE", err=True)
        return
    try:
        for file in files:
            if file.text is not None:
                write_secret(file)
                typer.echo(f"wrote {file.path} (mode 600) for {variable(file.setting)}_FILE", err=True)
        if existing is not None:
            typer.echo(f"backed up {target} to {backup(target, datetime.now(UTC))}", err=True)
            mode = stat.S_IMODE(target.stat().st_mode)
        else:
            mode = 0o644 if scope is Scope.PROJECT and config is None else 0o600
        replace(target, text, mode=mode)
    except (InstallError, OSError) as error:
        _fail(str(error))
    typer.echo(f'{host}: server "{name}" written to {target}')
    typer.echo(f"restart {host} (or reload its MCP servers) to start it", err=True)


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(NOTHING_WRITTEN)
