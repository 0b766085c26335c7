"""`mcp-elicit call TARGET TOOL`: call one tool of any MCP server, with a person (or a script) to answer it.

It is the client kit as a command: the server may ask mid-call, on whatever era was negotiated, and the
question reaches the person at this terminal (or the answers of `--script FILE`, where a question no entry
answers stops the call, naming it, unless `--on-missing cancel` answers it cancel); with no terminal and no
script there is nobody to ask, and the kit declares no elicitation at all, so the server falls back or says
what is missing instead of waiting for nobody. A stdio server is started like a command typed at the shell:
it inherits this environment (the SDK would pass only a few safe variables, which would lose, for one,
`MCP_ELICIT_STORE`). Its stderr goes to a log file (`--server-log FILE`, by default a new file in the
temporary directory, kept only when the call fails), so that its logs do not run through the person's
prompts: its last line is quoted if it dies, its last lines are shown when the tool reports an error (the
SDK tells the client only "Error executing tool X" about a crash), and the file is named with any failure.
A result the server replayed from an identical earlier call is said to be one. While the call waits on a
URL flow, or the server keeps it in still-waiting rounds with no URL flow of its own (an identical call
carries the question it waits on), a live status line says since when and until when, with keys to retry
now ("I'm done") or to cancel; a script answers that prompt with `done` or `stop` (`_waits`). The command
declares MCP tasks, so a server may run the call as a task: it is followed to its end, its questions asked
here like any other, and while it works without asking anything the status line shows it with the time
elapsed and its TTL as the deadline (`stop` cancels the task). With `--tool-approval` it also declares the
experimental tool-approval extension (a draft, SEP-2848): a server that serves it answers a call waiting on
others' approval with a task, shown "waiting for approval" until it is decided; the result says whether the
tool ran.

Exit codes: 0 the tool succeeded, 1 the tool reported an error, the call was refused or stopped, or the
script had no answer for a question,
2 the command could not be run (bad arguments, unknown tool, no server to talk to), 130 interrupted.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TextIO

import anyio
import httpx2
import typer
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from mcp_elicit.cli._failures import (
    CALL_FAILED,
    USAGE,
    CommandFailed,
    HttpRefusal,
    Situation,
    describe,
    era_hint,
    http_refusal,
)
from mcp_elicit.cli._logs import one_line_warnings
from mcp_elicit.cli._tool_result import print_result, replay_note, result_text
from mcp_elicit.cli._waits import OnMissing, ScriptShown, waits_shown
from mcp_elicit.client import (
    ElicitationHandler,
    ElicitingClient,
    Http,
    NoPersonHandler,
    ScriptedHandler,
    ScriptError,
    TerminalHandler,
    load_script,
)
from mcp_elicit.client.pending import FlowWaits
from mcp_elicit.client.session import Target, kit_http_client
from mcp_elicit.client.terminal_views import printable
from mcp_elicit.client.tokens import LoginError, LoginStore, SavedLogin, fresh_access_token
from mcp_elicit.settings import Settings, SettingsError, variable

INTERRUPTED = 130
LOG_TAIL_LINES = 20
"""Lines of a stdio server's log shown when its tool reports an error."""
TOKEN_ENV = variable("token")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class EraChoice(StrEnum):
    AUTO = "auto"
    V2025_11_25 = "2025-11-25"
    V2026_07_28 = "2026-07-28"


EraOption = Annotated[
    EraChoice,
    typer.Option(
        "--era",
        help="Protocol era: auto negotiates (2026-07-28 when the server offers it), or pin 2025-11-25 or 2026-07-28.",
    ),
]


@dataclass
class Server:
    """Where to connect: an http(s) URL, or a stdio command whose stderr goes to `log`."""

    label: str
    url: str | None = None
    command: list[str] = field(default_factory=list)
    token: str | None = None
    kept: SavedLogin | None = None
    """The sign-in `mcp-elicit login` kept for this URL, used when no token is given."""
    log: Path | None = None
    refusal: HttpRefusal | None = None
    """The last HTTP error seen, since the SDK turns a 401 into a bare JSON-RPC error."""
    protocol: str | None = None
    tool_approval: bool = False
    """Declare the tool-approval extension (`--tool-approval`)."""

    async def _observe(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.refusal = await http_refusal(response)

    def situation(self, connected: bool) -> Situation:
        return Situation(
            self.label,
            connected,
            self.last_words(),
            self.refusal,
            self.token is not None,
            protocol=self.protocol,
        )

    def last_words(self) -> str | None:
        lines = self.last_lines(1)
        return lines[0].strip() if lines else None

    def last_lines(self, count: int) -> list[str]:
        """The last `count` lines the stdio server wrote to its log that are not blank."""
        if self.log is None:
            return []
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return []
        return [line.rstrip() for line in text.splitlines() if line.strip()][-count:]

    def with_log(self, failed: CommandFailed) -> CommandFailed:
        """The failure, naming the server's log when the server wrote one."""
        if not self.last_lines(1):
            return failed
        return CommandFailed(f"{failed.message} (server log: {self.log})", failed.code)

    @asynccontextmanager
    async def client(self, handler: ElicitationHandler, era: EraChoice) -> AsyncIterator[ElicitingClient]:
        if self.kept is not None:
            try:
                self.token = await fresh_access_token(LoginStore(), self.kept)
            except LoginError as error:
                raise CommandFailed(str(error)) from None
        if self.url is not None:
            async with kit_http_client(bearer_token=self.token) as http:
                http.event_hooks = {"response": [self._observe]}
                async with ElicitingClient(
                    Http(self.url, http_client=http),
                    handler,
                    era=era.value,
                    tasks=True,
                    tool_approval=self.tool_approval,
                ) as client:
                    yield client
            return
        assert self.log is not None
        params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=dict(os.environ))
        with self.log.open("w", encoding="utf-8") as errlog:
            transport: Target = stdio_client(params, errlog=errlog)
            kit = ElicitingClient(transport, handler, era=era.value, tasks=True, tool_approval=self.tool_approval)
            async with kit as client:
                yield client


def parse_arguments(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; a value that parses as JSON is that JSON (`true`, `3`, `["a"]`), any other a string."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, equals, raw = pair.partition("=")
        key = key.strip()
        if not equals or not key:
            raise CommandFailed(f"--arg {pair!r} is not KEY=VALUE")
        if key in arguments:
            raise CommandFailed(f"--arg {key} is given twice")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


def resolve_server(target: str, token: str | None) -> Server:
    """An http(s) URL as it is; anything else is a command line, split as a shell would split it."""
    text = target.strip()
    if _URL_SCHEME.match(text):
        if not text.lower().startswith(("http://", "https://")):
            raise CommandFailed(f"unsupported target {text!r}: give an http(s):// URL or a command")
        token = token if token is not None else _token_from_env()
        return Server(label=text, url=text, token=token, kept=None if token is not None else _kept_login(text))
    if token is not None:
        raise CommandFailed("--token applies to an http(s) target only; a stdio server runs as you")
    try:
        command = shlex.split(text)
    except ValueError as error:
        raise CommandFailed(f"cannot split the command {target!r}: {error}") from None
    if not command:
        raise CommandFailed("the target is empty: give an http(s):// URL or a command")
    if shutil.which(command[0]) is None:
        raise CommandFailed(f"command not found: {command[0]}")
    return Server(label=shlex.join(command), command=command)


def _token_from_env() -> str | None:
    """`MCP_ELICIT_TOKEN`, or the token in the file `MCP_ELICIT_TOKEN_FILE` names (`mcp_elicit.settings`)."""
    try:
        token = Settings.read(only=["token"]).token
    except SettingsError as error:
        raise CommandFailed(str(error)) from None
    return None if token is None else token.get_secret_value()


def _kept_login(url: str) -> SavedLogin | None:
    try:
        return LoginStore().load(url)
    except LoginError as error:
        raise CommandFailed(str(error)) from None


def choose_handler(script: Path | None, console: Console, on_missing: OnMissing | None = None) -> ElicitationHandler:
    if script is None and on_missing is not None:
        raise CommandFailed("--on-missing applies with --script only: it says what a question the script misses gets")
    if script is not None:
        try:
            return ScriptShown(ScriptedHandler(load_script(script)), console, on_missing or OnMissing.FAIL)
        except (ScriptError, OSError) as error:
            raise CommandFailed(f"cannot use the script {script}: {error}") from None
    if _interactive(sys.stdin) and _interactive(sys.stdout):
        return TerminalHandler()
    return NoPersonHandler()


def call(
    target: Annotated[
        str, typer.Argument(help='An http(s):// MCP endpoint, or a command running a stdio server: "mcp-elicit serve".')
    ],
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    arg: Annotated[
        list[str] | None,
        typer.Option("--arg", "-a", help="KEY=VALUE, repeatable; VALUE is JSON when it parses as JSON, else a string."),
    ] = None,
    era: EraOption = EraChoice.AUTO,
    script: Annotated[
        Path | None,
        typer.Option(
            help="Answer the server's questions from this JSON script instead of asking. A question no entry "
            "answers stops the call (exit 1, naming the question) unless --on-missing cancel."
        ),
    ] = None,
    on_missing: Annotated[
        OnMissing | None,
        typer.Option(
            help="With --script, a question no entry answers: fail (the default) stops the call and leaves the "
            "question unanswered (exit 1); cancel answers it cancel and the call goes on.",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help=f"Bearer token for an http(s) target (default: ${TOKEN_ENV}, or the file ${TOKEN_ENV}_FILE names, "
            "or the one `mcp-elicit login URL` kept).",
            show_default=False,
        ),
    ] = None,
    server_log: Annotated[
        Path | None,
        typer.Option(
            help="Write a stdio server's stderr to this file (default: a temporary file, kept if the call fails).",
            show_default=False,
        ),
    ] = None,
    tool_approval: Annotated[
        bool,
        typer.Option(
            "--tool-approval",
            help="Declare the experimental tool-approval extension (draft SEP-2848): a call that waits on others' "
            "approval is followed as a task, shown as waiting for approval.",
        ),
    ] = False,
) -> None:
    """Call one tool; the server's questions are asked at this terminal (or answered by --script)."""
    one_line_warnings()
    server: Server | None = None
    try:
        arguments = parse_arguments(arg or [])
        server = resolve_server(target, token)
        server.tool_approval = tool_approval
        if server_log is not None and server.url is not None:
            raise CommandFailed("--server-log applies to a stdio server only; an http(s) server keeps its own logs")
        handler = choose_handler(script, out, on_missing)
        code = _run_with_log(server, tool, arguments, handler, era, server_log)
    except CommandFailed as failed:
        _fail(failed)
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(INTERRUPTED) from None
    raise typer.Exit(code)


def _run_with_log(
    server: Server,
    tool: str,
    arguments: dict[str, Any],
    handler: ElicitationHandler,
    era: EraChoice,
    server_log: Path | None,
) -> int:
    """The call, a stdio server's stderr going to `server_log`, or to a temporary file kept only on failure."""
    if server.url is not None:
        return anyio.run(_call, server, tool, arguments, handler, era)
    server.log = server_log if server_log is not None else _new_log_file()
    keep = False
    try:
        code = anyio.run(_call, server, tool, arguments, handler, era)
        keep = code != 0
        return code
    except CommandFailed:
        keep = True
        raise
    finally:
        if server_log is None and not (keep and server.last_lines(1)):
            server.log.unlink(missing_ok=True)


def _new_log_file() -> Path:
    """A new file only this user can read: a server's log may hold what its tools were given."""
    descriptor, name = tempfile.mkstemp(prefix="mcp-elicit-call-", suffix=".log")
    os.close(descriptor)
    return Path(name)


async def _call(
    server: Server, tool: str, arguments: dict[str, Any], handler: ElicitationHandler, era: EraChoice
) -> int:
    connected = False
    try:
        async with server.client(handler, era) as client:
            connected = True
            server.protocol = client.protocol_version
            name = client.server_info.name if client.server_info is not None else server.label
            err.print(f"[dim]connected to {escape(name)}, protocol {escape(client.protocol_version)}[/dim]")
            listing = await client.list_tools()
            names = sorted(t.name for t in listing.tools)
            if tool not in names and listing.next_cursor is None:
                offered = ", ".join(names) or "none"
                raise CommandFailed(f"{server.label} has no tool {tool!r}; its tools: {offered}")
            waits = (FlowWaits(client.pending, browser_time=client.pacing.max_wait), client.rounds, client.tasks)
            async with waits_shown(handler, waits, out, time.monotonic):
                result = await client.call_tool(tool, arguments)
    except Exception as error:
        failed = describe(error, server.situation(connected))
        if failed.code == CALL_FAILED and isinstance(handler, NoPersonHandler):
            failed = CommandFailed(
                f"{failed.message}; nobody can be asked here (no terminal): use --script FILE", CALL_FAILED
            )
        raise server.with_log(failed) from None
    print_result(out, result)
    if (note := replay_note(result, datetime.now(UTC))) is not None:
        err.print(Text(note, style="dim"), soft_wrap=True)
    if result.is_error:
        err.print(f"[red]the tool {escape(tool)} reported an error[/red]")
        if (hint := era_hint(result_text(result), server.protocol)) is not None:
            err.print(Text(printable(hint)), soft_wrap=True)
        _show_log_tail(server)
        return CALL_FAILED
    return 0


def _show_log_tail(server: Server) -> None:
    lines = server.last_lines(LOG_TAIL_LINES)
    if not lines:
        return
    err.print(Text(f"the server's log ({server.log}) ends with:", style="dim"), soft_wrap=True)
    for line in lines:
        err.print(Text(f"  {printable(line)}", style="dim"), soft_wrap=True)


def _interactive(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fail(failed: CommandFailed) -> NoReturn:
    err.print(Text.assemble(("error:", "red"), " ", printable(failed.message, multiline=True)), soft_wrap=True)
    raise typer.Exit(failed.code or USAGE)
