"""`mcp-elicit demo`: the reference server's scenarios, asked of a person at this terminal, start to finish.

The demo is the shortest way to see what the library is for: it starts the reference HTTP deployment
(`reference.demo_stack`), signs in its own throwaway user, and calls each scenario's tool through the
client kit, so that the questions reach the person exactly as they would in a host. Between scenarios it
reads the store and says what just became durable. With `--script FILE` the answers come from the file and
the URL-mode consent is completed by a scripted browser walking the same pages over HTTP, so an unattended
run (`make run` without a terminal, CI) exercises the very same path.

Ctrl-C at a question (or at the status line of the browser step) cancels that question only, and says
so; a second Ctrl-C within `CTRL_C_AGAIN` seconds stops the demo, as Ctrl-C does anywhere else. A browser
step cancelled that way, or left open by a stop, is cancelled in the store too (audited, by "mcp-elicit
demo"): the demo owns the whole deployment, and its throwaway user vanishes with it, so a decision nobody
can complete any more says so at once instead of staying `accepted_url` until its TTL.

Exit codes: 0 every scenario ran (whatever was answered), 1 a tool reported an error or a call stopped,
2 the demo could not start (store, processes, sign-in, no terminal and no script), 130 interrupted.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
import webbrowser
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import anyio
import typer
from anyio.abc import TaskGroup, TaskStatus
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from mcp_elicit.cli._browser import graphical_session
from mcp_elicit.cli._demo_scenarios import SCENARIOS, Scenario
from mcp_elicit.cli._failures import CALL_FAILED, USAGE, CommandFailed, Situation, describe
from mcp_elicit.cli._logs import one_line_warnings
from mcp_elicit.cli._tool_result import print_result
from mcp_elicit.cli._waits import ScriptShown, waits_shown
from mcp_elicit.cli.call import EraChoice, EraOption
from mcp_elicit.client import (
    ElicitationHandler,
    ElicitingClient,
    FlowStatus,
    Http,
    PendingFlow,
    PendingFlows,
    ScriptedHandler,
    ScriptError,
    TerminalHandler,
    UrlOpener,
    load_script,
)
from mcp_elicit.client.pending import FlowWaits, Wait
from mcp_elicit.model import Decision, DecisionStatus, Operator
from mcp_elicit.reference.demo_stack import DemoStack, StackError, running_stack, sign_in
from mcp_elicit.reference.scripted_browser import ScriptedBrowser, WalkFailed
from mcp_elicit.store import ENV_VAR, Store, StoreError, default_store_path, default_store_url, open_store

SCRIPTED_SCENARIO_TIMEOUT = 120.0
"""Seconds one scenario may take when nobody is at the keyboard; an unattended run must never hang."""
CTRL_C_AGAIN = 2.0
"""Seconds within which a second Ctrl-C stops the demo; the first one cancels the question on screen."""
INTERRUPTED = 130
READER = Operator("mcp-elicit demo")

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def demo(
    script: Annotated[
        Path | None,
        typer.Option(help="Answer from this JSON script (see examples/demo-script.json) instead of asking you."),
    ] = None,
    workspace: Annotated[
        Path | None, typer.Option(help="Directory the tools act on (default: a fresh one for this run).")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store", envvar=ENV_VAR, help="Store URL; default: the embedded SQLite file.", show_default=False
        ),
    ] = None,
    no_browser: Annotated[bool, typer.Option(help="Print the URL-mode page's address instead of opening it.")] = False,
    era: EraOption = EraChoice.AUTO,
) -> None:
    """Walk through the scenarios: deploy approval, procurement choice, delete confirmation, account connect."""
    one_line_warnings()
    signal.signal(signal.SIGTERM, _interrupt)
    handler = _handler(script)
    say = handler.say if isinstance(handler, TerminalHandler) else out.print
    store_url = store or default_store_url()
    try:
        if store is None:
            default_store_path().parent.mkdir(parents=True, exist_ok=True)
        records = open_store(store_url)
    except (StoreError, OSError) as error:
        _fail(CommandFailed(f"cannot use the store: {error}"))
    hint = f" --store {_shown_url(store)}" if store is not None and os.environ.get(ENV_VAR) != store else ""
    run_dir = default_store_path().parent / "demo" / f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    narrator = Narrator(out, scripted=script is not None, store_hint=hint, say=say)
    narrator.intro()
    code = USAGE
    try:
        with running_stack(run_dir, store_url=store_url, workspace=workspace or run_dir / "workspace") as stack:
            narrator.started(stack, records.display_url, run_dir)
            code = anyio.run(_stopped_by_ctrl_c, _walkthrough, stack, handler, records, narrator, era, no_browser)
    except StackError as error:
        _fail(CommandFailed(f"the demo could not start: {error}"), run_dir)
    except CommandFailed as failed:
        _fail(failed, run_dir)
    except KeyboardInterrupt:
        if narrator.stack is not None:
            for decision in _cancel_open(records, narrator.stack.principal_id, "the demo was stopped"):
                err.print(Text(f"cancelled the open {_decision_line(decision)}"), soft_wrap=True)
        err.print(
            f"interrupted: the reference server and the provider are stopped; logs in {escape(str(run_dir))}",
            soft_wrap=True,
        )
        raise typer.Exit(INTERRUPTED) from None
    finally:
        records.close()
    narrator.finished(run_dir)
    raise typer.Exit(code)


class Narrator:
    """Everything the demo says besides the questions and results: where things are, what became durable."""

    def __init__(
        self, console: Console, *, scripted: bool, store_hint: str, say: Callable[[RenderableType], None]
    ) -> None:
        self.console = console
        self.scripted = scripted
        self.store_hint = store_hint
        self.say = say
        """How to print while a call runs: above the live status line, when one shows."""
        self.seen: set[str] = set()
        self.stack: DemoStack | None = None
        self.current: Scenario | None = None

    def intro(self) -> None:
        self.console.print(Rule(Text("mcp-elicit demo", style="bold")))
        self.console.print(
            Text(
                "A tool sometimes reaches a point where only a person can decide. Each answer below becomes a "
                "decision record: bound to the signed-in user and this client, with a deadline, completed once "
                "by compare-and-set, every transition audited. Starting the reference server over HTTP (its own "
                "sign-in, URL-mode pages and vault) and a stand-in OAuth provider on loopback..."
            )
        )

    def started(self, stack: DemoStack, store: str, run_dir: Path) -> None:
        self.stack = stack
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        table.add_row("reference server", stack.server_url)
        table.add_row("  sign in as", f"{stack.user.username}  password {stack.user.password}")
        table.add_row("Example provider", stack.provider_url)
        table.add_row("  sign in as", f"{stack.provider_user.username}  password {stack.provider_user.password}")
        table.add_row("store", store)
        table.add_row("workspace", str(stack.workspace))
        table.add_row("logs", str(run_dir))
        self.console.print(table)
        self.console.print(
            Text(
                "Both users are throwaway: they exist in these two processes only and vanish when the demo "
                "stops. The demo signs in its own throwaway user (OAuth client registration, authorization "
                "code with PKCE, the sign-in form), as an MCP client would, and calls the tools with that token.",
                style="dim",
            )
        )
        if not self.scripted:
            self.console.print(
                Text(
                    "In a question: Enter accepts a field; Esc, Ctrl-C or Ctrl-D cancels that question; "
                    "d at the review declines it. A second Ctrl-C within 2 s, or Ctrl-C anywhere else, "
                    "stops the demo.",
                    style="dim",
                )
            )

    def scenario(self, number: int, scenario: Scenario) -> None:
        self.current = scenario
        stack = self._stack()
        self.console.print()
        self.console.print(Rule(Text(f"{number}/{len(SCENARIOS)}  {scenario.title}", style="bold")))
        self.console.print(
            Text(
                scenario.before.format(
                    user=stack.user.username,
                    password=stack.user.password,
                    provider_user=stack.provider_user.username,
                    provider_password=stack.provider_user.password,
                )
            )
        )
        arguments = ", ".join(f"{key}={value!r}" for key, value in scenario.arguments.items())
        self.console.print(Text(f"calling {scenario.tool}({arguments})", style="dim"))

    def durable(self, scenario: Scenario, records: Store) -> None:
        """The decisions this scenario created, as the store now holds them."""
        listed = records.list_decisions(READER, principal_id=self._stack().principal_id, limit=100)
        fresh = [decision for decision in reversed(listed) if decision.elicitation_id not in self.seen]
        self.seen.update(decision.elicitation_id for decision in fresh)
        self.console.print(Text("What is durable now:", style="bold"))
        for decision in fresh:
            self.console.print(Text(f"  {_decision_line(decision)}"))
        if fresh:
            short = fresh[-1].elicitation_id[:8]
            self.console.print(
                Text(
                    f"  every transition is audited: mcp-elicit decisions audit {short}{self.store_hint}", style="dim"
                ),
                soft_wrap=True,
            )
        else:
            self.console.print(Text("  no question was needed, so no decision was recorded", style="dim"))
        self.console.print(Text(f"  {scenario.after}"))

    def flow_changed(self, flow: PendingFlow) -> None:
        stack = self._stack()
        if flow.status is FlowStatus.OPEN and self.scripted:
            self.say(Text("The scripted browser walks the pages over HTTP...", style="dim"))
        elif flow.status is FlowStatus.OPEN:
            steps = (self.current.browser if self.current is not None else "") or SCENARIOS[3].browser
            shown = steps.format(
                user=stack.user.username,
                password=stack.user.password,
                provider_user=stack.provider_user.username,
                provider_password=stack.provider_user.password,
            )
            self.say(Text(f"Waiting for the browser: {shown}. c or Ctrl-C cancels this step.", style="bold"))
        elif flow.status is FlowStatus.COMPLETED:
            self.say(Text("The server announced the flow's completion.", style="dim"))
        elif flow.status in (FlowStatus.FAILED, FlowStatus.CANCELLED):
            self.say(Text(f"The browser flow {flow.status.value}: {flow.reason}", style="bold red"))

    def page_to_open(self, url: str, why: str) -> None:
        self.console.print(Text(why, style="bold"))
        self.console.print(Text(f"  {url}"))

    def finished(self, run_dir: Path) -> None:
        self.console.print()
        self.console.print(Rule(Text("done", style="bold")))
        self.console.print(Text("The reference server and the provider are stopped; the decisions stay in the store."))
        self.console.print(Text(f"List them with: mcp-elicit decisions ls{self.store_hint}"), soft_wrap=True)
        self.console.print(Text(f"This run's workspace and logs: {run_dir}"), soft_wrap=True)

    def _stack(self) -> DemoStack:
        if self.stack is None:
            raise RuntimeError("the stack is not running")
        return self.stack


async def _stopped_by_ctrl_c(walk: Callable[..., Awaitable[int]], *args: Any) -> int:
    """`walk`, ended by SIGINT (Ctrl-C between prompts, or the second press at one) as KeyboardInterrupt.

    The event loop's own SIGINT handling cancels the main task, which a call under way (a retry, a shielded
    cleanup) may absorb: the demo then went on to the next scenario. A cancel scope cannot be absorbed.
    """
    interrupted = False

    async def watch(group: TaskGroup, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        nonlocal interrupted
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                interrupted = True
                group.cancel_scope.cancel()
                return

    code = USAGE
    async with anyio.create_task_group() as group:
        await group.start(watch, group)
        code = await walk(*args)
        group.cancel_scope.cancel()
    if interrupted:
        raise KeyboardInterrupt
    return code


async def _walkthrough(
    stack: DemoStack, handler: ElicitationHandler, records: Store, narrator: Narrator, era: EraChoice, no_browser: bool
) -> int:
    connected = False
    try:
        token = await sign_in(stack)
        code = 0
        pending = PendingFlows(on_change=narrator.flow_changed)
        async with anyio.create_task_group() as background:
            opener = (
                _scripted_opener(stack, pending, narrator, background)
                if narrator.scripted
                else _browser_opener(narrator, no_browser)
            )
            async with ElicitingClient(
                Http(stack.mcp_url, bearer_token=token), handler, era=era.value, pending=pending, opener=opener
            ) as client:
                connected = True
                waits = BrowserWaits(FlowWaits(pending, browser_time=client.pacing.max_wait), records, narrator)
                for number, scenario in enumerate(SCENARIOS, start=1):
                    narrator.scenario(number, scenario)
                    with anyio.move_on_after(SCRIPTED_SCENARIO_TIMEOUT if narrator.scripted else None) as limit:
                        async with waits_shown(handler, (waits, client.rounds), out, time.monotonic):
                            result = await client.call_tool(scenario.tool, scenario.arguments)
                    if limit.cancelled_caught:
                        raise CommandFailed(
                            f"{scenario.tool} did not finish within {SCRIPTED_SCENARIO_TIMEOUT:.0f} s", CALL_FAILED
                        )
                    print_result(out, result)
                    if result.is_error:
                        code = CALL_FAILED
                    narrator.durable(scenario, records)
            background.cancel_scope.cancel()
    except StackError:
        raise
    except Exception as error:
        raise describe(error, Situation(stack.mcp_url, connected)) from None
    return code


class BrowserWaits:
    """The demo's URL flows as waits; cancelling one cancels its decision in the store, then lets the call
    go on, so the server ends the step itself ("Not connected (cancelled)") on either era."""

    def __init__(self, flows: FlowWaits, records: Store, narrator: Narrator) -> None:
        self._flows = flows
        self._records = records
        self._narrator = narrator

    def waits(self) -> Sequence[Wait]:
        return self._flows.waits()

    def retry_now(self, wait_id: str) -> bool:
        return self._flows.retry_now(wait_id)

    def cancel(self, wait_id: str, reason: str) -> bool:
        flow = self._flows.pending.get(wait_id)
        decision_id = flow.elicitation_id or _decision_of(flow.url)
        if decision_id is None:
            return self._flows.cancel(wait_id, reason)
        try:
            decision = self._records.get_decision(decision_id, READER)
            if not decision.is_terminal:
                decision = self._records.transition(decision, DecisionStatus.CANCELLED, caller=READER, reason=reason)
        except StoreError as error:
            self._narrator.say(Text(f"The decision {decision_id[:8]} could not be cancelled: {error}", style="bold"))
            return self._flows.cancel(wait_id, reason)
        self._narrator.say(Text(f"In the store: {_decision_line(decision)}; the server ends the step.", style="bold"))
        self._flows.retry_now(wait_id)
        return True


def _decision_of(url: str) -> str | None:
    """The decision a page of the reference server is about: `/elicit/{id}`."""
    parts = urlsplit(url).path.strip("/").split("/")
    return parts[1] if len(parts) == 2 and parts[0] == "elicit" else None


def _cancel_open(records: Store, principal_id: str, reason: str) -> list[Decision]:
    """Cancel every decision of the run's throwaway user still open: once the demo stops, nobody can."""
    cancelled = []
    for decision in records.list_decisions(READER, principal_id=principal_id, limit=100):
        if decision.is_terminal:
            continue
        try:
            cancelled.append(records.transition(decision, DecisionStatus.CANCELLED, caller=READER, reason=reason))
        except StoreError:
            continue
    return cancelled


class CtrlC:
    """Ctrl-C read at a prompt or at the status line: the first press cancels what is on screen (and says how
    to stop); a second within `CTRL_C_AGAIN` seconds stops the demo the way Ctrl-C does between prompts, with
    SIGINT, and the prompt answers nothing on the way down."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self._console = console
        self._clock = clock
        self._last: float | None = None

    def __call__(self) -> bool:
        now = self._clock()
        if self._last is not None and now - self._last <= CTRL_C_AGAIN:
            signal.raise_signal(signal.SIGINT)
            return True
        self._last = now
        self._console.print(Text("Press Ctrl-C again to stop the demo.", style="bold"))
        return False


def _scripted_opener(stack: DemoStack, pending: PendingFlows, narrator: Narrator, background: TaskGroup) -> UrlOpener:
    """Hands the consented URL to the scripted browser in the background, as a browser tab would take it."""
    browser = ScriptedBrowser(stack.server_url, stack.provider_url, stack.user, stack.provider_user)

    async def walk(url: str) -> None:
        try:
            walked = await browser.walk(url)
        except WalkFailed as error:
            narrator.console.print(Text(f"The scripted browser failed: {error}", style="bold red"))
            for flow in pending.list(active=True):
                if flow.url == url:
                    pending.cancel(flow.id, f"the scripted browser failed: {error}")
            return
        narrator.console.print(Text("Scripted browser: " + "; ".join(walked.steps) + ".", style="dim"))

    async def open_in_background(url: str) -> bool:
        background.start_soon(walk, url)
        return True

    return open_in_background


def _browser_opener(narrator: Narrator, no_browser: bool) -> UrlOpener:
    """The system browser after consent; the address printed instead when asked to, or when none can start."""

    def open_page(url: str) -> bool:
        if no_browser:
            narrator.page_to_open(url, "Open this page in your browser:")
            return True
        if graphical_session() and webbrowser.open(url, new=2):
            narrator.page_to_open(url, "Opened in your browser:")
            return True
        narrator.page_to_open(url, "No browser could be started from here; open this page yourself:")
        return True

    return open_page


def _handler(script: Path | None) -> ElicitationHandler:
    if script is not None:
        try:
            return ScriptShown(ScriptedHandler(load_script(script)), out)
        except (ScriptError, OSError) as error:
            _fail(CommandFailed(f"cannot use the script {script}: {error}"))
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        _fail(CommandFailed("no terminal to ask you at: run with --script examples/demo-script.json"))
    return TerminalHandler(on_ctrl_c=CtrlC(out))


def _shown_url(url: str) -> str:
    """The store URL as given, to paste into the next command; a password in it is not repeated on screen."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _decision_line(decision: Decision) -> str:
    return (
        f"decision {decision.elicitation_id[:8]} ({decision.key}, {decision.mode.value} mode): {decision.status.value}"
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM takes the Ctrl-C path (the event loop's own, when one runs), so the processes are stopped too."""
    signal.raise_signal(signal.SIGINT)


def _fail(failed: CommandFailed, run_dir: Path | None = None) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(failed.message)}", soft_wrap=True)
    if run_dir is not None and run_dir.exists():
        err.print(f"the logs of the reference server and the provider are in {escape(str(run_dir))}", soft_wrap=True)
    raise typer.Exit(failed.code or USAGE)
