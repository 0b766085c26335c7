"""The tests' one mcp-elicit server: its tool sets, store, transport, timings and faults are options.

Each tool set stands for one kind of external system or one protocol situation a group of tests needs:

- `flow`: the `Flow` tools most tests share; their side effects are counted in the `--effects` file, so a
  test can prove a step ran exactly once.
- `kit`: two plain tools for the client kit: `capabilities` returns the client capabilities the call arrived
  with (from `initialize` on 2025-era connections, from the request's `_meta` on 2026-07-28), `silent`
  sleeps without sending anything, for the silence watch.
- `transfer`: a question, then a transfer on a ledger that takes an idempotency key, as a payment provider
  would; stalls at `before-transfer` (answer recorded, no effect yet) or `after-transfer` (effect made, its
  result not journaled), to be SIGKILLed there.
- `ship`: one question whose text holds a secret word; with `--webhook` the outbox goes to the webhook of
  `MCP_ELICIT_WEBHOOK_URL`/`_SECRET` (read as `mcp-elicit serve` reads them), retried fast.
- `overlap`: `compute`, `approve` and `ponder`, a slow journaled step (`--work-seconds`, or a stall at
  `work`) and an instant one, each run logged with its idempotency key and returning a receipt that is new
  on every run, so two runs of one operation's step never give the same result (the single-flight tests).
- `pending`: `connect_later`, a URL flow that does not hold the call (`-32042` on 2025-11-25, still-waiting
  rounds on 2026-07-28); with `--no-lifespan` nothing ever announces the flow's completion, so the client
  learns of it only by retrying. `complete` finishes it out of band, as the decision page's callback would.
- `waiting`: `approve(n)`, one form question; identical calls meanwhile (each through its own process on the
  shared store) get still-waiting rounds with no URL flow; each round served is logged to `--rounds-log`.
- `tasks`: tools that run as MCP tasks; `deploy` plans, asks, prepares (stalls at `prepare`) and applies
  with an idempotency key on the workspace's ledger.

The tools' external systems keep their files in `--workspace` (`Workspace`), which every process of a test
shares and the test reads. Several processes may share one store; they share the requestState keys, so a
2026-07-28 round can be answered by any of them.

    python -m tests.helpers.server serve --tools flow,kit --store URL --effects FILE   # stdio
    python -m tests.helpers.server serve --tools overlap --store URL --workspace DIR --port N   # HTTP
    python -m tests.helpers.server complete [PAGE_URL]   # the "browser" that finishes a pending flow

`build` makes the same server in-process, `serve` runs it (the overlap tests fork it from a forkserver that
preloaded `PRELOAD`), and each `*_tools` function puts one tool set on an `Elicitation` made elsewhere (the
tests' authenticated in-thread servers; `kit_tools` on its `MCPServer`). This module imports nothing from
`tests`, so it also runs by its path, and nothing of the SDK until a server is built: `complete` starts
fast, as a browser command must (the store then comes from `MCP_ELICIT_STORE`, since `$BROWSER` is split
at every colon).

(No `from __future__ import annotations`: a tool's `Flow` annotation, imported where the tool set is built,
must be evaluated where the tool is defined.)
"""

import argparse
import fcntl
import json
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from mcp_elicit.model import DecisionStatus, Operator, Principal, ResumePolicy
from mcp_elicit.store import ENV_VAR, open_store

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp

    from mcp_elicit.server import Elicitation, Notifications

NAME = "elicit-test-server"
VERSION = "7.1.0"
KEYS = [b"s" * 32]
"""The requestState key ring every process of a test shares."""
TOOL_SETS = ("flow", "kit", "transfer", "ship", "overlap", "pending", "waiting", "tasks")
STALLS = ("before-transfer", "after-transfer", "prepare", "work")
PRELOAD = ("mcp_elicit.server", "uvicorn")
"""What serving imports: a forkserver that preloads these (and this module) forks servers that start at once."""
ROUNDS_LOG = "ROUNDS_LOG"
"""The environment variable `--rounds-log` defaults to, so one command line serves a logged and an unlogged call."""
PAGES = "https://pages.example"
MESSAGE = "Connect your Example account"
CONNECTED = "Connected the Example account."
OWNER = Principal("local-user", "stdio")
"""Who a stdio call is made by: the explicit local principal."""


class Form(BaseModel):
    """A question's model, whose schema is built when it is first used: `complete` then starts without it."""

    model_config = ConfigDict(defer_build=True)


class Approval(Form):
    approve: bool = Field(description="Approve the production deploy")
    note: str | None = Field(default=None, description="Anything the team should know")


class Seats(Form):
    seats: int = Field(ge=1, le=9, description="How many seats")


class Name(Form):
    name: str = Field(min_length=1, description="Your name")


class Confirm(Form):
    confirm: bool = Field(description="Go ahead")


class Window(Form):
    window: str


@dataclass(frozen=True)
class Options:
    """What one server is; each field is the `serve` option of the same name (`--work-seconds` for
    `work_seconds`, `--no-lifespan` for `lifespan=False`). `None` timings are `Elicitation`'s defaults;
    `port=None` serves stdio."""

    store: str
    tools: tuple[str, ...] = ("flow",)
    port: int | None = None
    name: str = NAME
    title: str | None = None
    """What a client shows for the server when set (its name otherwise)."""
    public_base_url: str | None = None
    lease: float | None = None
    long_poll: float | None = None
    reask_after: float | None = None
    task_poll: float | None = None
    lifespan: bool = True
    """False: a plain `MCPServer` without the runtime's lifespan, so nothing announces a URL flow's completion."""
    webhook: bool = False
    die_after_round: bool = False
    """SIGKILL the process once a 2026-07-28 round is committed and its response is about to leave (HTTP)."""
    workspace: Path | None = None
    effects: Path | None = None
    stall: str | None = None
    """Where a step stalls for an hour (one of `STALLS`), after writing `stalled-<point>` in the workspace."""
    work_seconds: float = 0.5
    ponder: float = 0.0
    """Seconds `ponder` waits between its answer and its step, committing nothing."""
    rounds_log: Path | None = None


# -- the external systems ------------------------------------------------------------------------------


class Counter:
    """Counts side effects in a file, the way a real external system would keep them.

    Steps of parallel calls run in threads and server processes at once, so a count is bumped under an
    exclusive lock and written whole (rename), never read half-written.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def bump(self, what: str) -> int:
        with self.path.with_suffix(".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            counts = self.read()
            counts[what] = counts.get(what, 0) + 1
            written = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
            written.write_text(json.dumps(counts))
            os.replace(written, self.path)
            return counts[what]

    def read(self) -> dict[str, int]:
        if not self.path.exists():
            return {}
        loaded: dict[str, int] = json.loads(self.path.read_text())
        return loaded


class Workspace:
    """The external systems of `transfer`, `overlap` and `tasks`: files in one directory, which outlive the
    server processes (as a real system outlives its callers) and which the test reads."""

    def __init__(self, root: Path, *, stall: str | None = None) -> None:
        self.root = root
        self.stall = stall
        root.mkdir(parents=True, exist_ok=True)

    def ran(self, step: str) -> None:
        with (self.root / f"ran-{step}").open("a") as log:
            log.write("x\n")

    def runs(self, step: str) -> int:
        path = self.root / f"ran-{step}"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def book(self, idempotency_key: str, value: object) -> None:
        """An entry under `idempotency_key`, unless one is there: a repeated request has no second effect."""
        entries = self.ledger()
        entries.setdefault(idempotency_key, value)
        (self.root / "ledger.json").write_text(json.dumps(entries))

    def ledger(self) -> dict[str, Any]:
        path = self.root / "ledger.json"
        loaded: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        return loaded

    def pause(self, point: str) -> None:
        if self.stall == point:
            (self.root / f"stalled-{point}").write_text("")
            time.sleep(3600)

    def stalled(self, point: str) -> bool:
        return (self.root / f"stalled-{point}").exists()

    def log_run(self, step: str, n: int, idempotency_key: str) -> None:
        with (self.root / "keys").open("a") as log:
            log.write(f"{step} {n} {idempotency_key}\n")

    def keys(self, n: int, step: str = "work") -> list[str]:
        """The idempotency keys `step` of the calls with argument `n` ran with, one per run, in order."""
        path = self.root / "keys"
        lines = path.read_text().splitlines() if path.exists() else []
        return [key for name, number, key in (line.split(" ", 2) for line in lines) if (name, number) == (step, str(n))]

    def arrived(self, n: int) -> None:
        with (self.root / "bodies").open("a") as log:
            log.write(f"{n}\n")

    def bodies(self, n: int) -> int:
        """How often a body of the calls with argument `n` started (each 2026-07-28 round runs it again)."""
        path = self.root / "bodies"
        return path.read_text().split().count(str(n)) if path.exists() else 0


def rounds(log: Path) -> list[float]:
    """When each round logged in `log` started (the server's clock, `time.time()`)."""
    return [float(line) for line in log.read_text().split()] if log.exists() else []


def complete(store_url: str) -> None:
    """What the decision page's callback does once the person is done in the browser: the store's one
    decision, a pending URL flow's, completes."""
    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
        if decision.status is DecisionStatus.REQUESTED:
            decision = store.transition(decision, DecisionStatus.ACCEPTED_URL, caller=OWNER, reason="page opened")
        pending = store.transition(decision, DecisionStatus.EXTERNAL_PENDING, caller=OWNER)
        store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=OWNER, reason="provider callback")
    finally:
        store.close()


# -- the tool sets ------------------------------------------------------------------------------------


def flow_tools(elicitation: "Elicitation", counter: Counter) -> None:
    from mcp_elicit.server import Accepted, Cancelled, Completed, Declined, Expired, Failed, Fallback, Flow

    @elicitation.tool()
    async def approve(flow: Flow, scope: str) -> str:
        """Ask for approval of a scope, then apply it once."""
        planned = await flow.step("plan", lambda: counter.bump("plan") and f"plan for {scope}")
        answer = await flow.ask(f"Apply {planned}?", Approval, key="approve_scope")
        match answer:
            case Accepted(data=approval) if approval.approve:
                await flow.step("apply", lambda: counter.bump("apply"))
                return f"applied {scope}" + (f" ({approval.note})" if approval.note else "")
            case Accepted():
                return "not approved"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
            case Expired():
                return "expired"

    @elicitation.tool()
    async def greet_and_book(flow: Flow) -> str:
        """Two questions in sequence; the second depends on the first."""
        name = await flow.ask("Who is travelling?", Name)
        if not isinstance(name, Accepted):
            return "no name"
        seats = await flow.ask(f"How many seats for {name.data.name}?", Seats)
        if not isinstance(seats, Accepted):
            return f"no seats for {name.data.name}"
        return f"{seats.data.seats} seats for {name.data.name}"

    @elicitation.tool(fallback=Fallback.ARGUMENTS)
    async def book_with_fallback(flow: Flow, city: str) -> str:
        """Falls back to call arguments when the client cannot show forms."""
        seats = await flow.ask(f"How many seats to {city}?", Seats)
        return f"booked {seats.data.seats} to {city}" if isinstance(seats, Accepted) else "not booked"

    @elicitation.tool()
    async def connect_later(flow: Flow) -> str:
        """A URL decision that does not block a legacy call: -32042, then the client retries."""
        outcome = await flow.ask_url("Connect your account", key="connect_account", resume=ResumePolicy.NOTIFICATION)
        return "connected" if isinstance(outcome, Completed) else type(outcome).__name__.lower()

    @elicitation.tool()
    async def connect(flow: Flow) -> str:
        """A URL decision completed out of band."""
        outcome = await flow.ask_url("Connect your account", key="connect_account")
        match outcome:
            case Completed():
                return "connected"
            case Failed():
                return "failed"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
            case Expired():
                return "expired"


def kit_tools(server: "MCPServer") -> None:
    import anyio
    from mcp.server.mcpserver import Context

    @server.tool()
    async def capabilities(ctx: Context) -> str:
        """The client capabilities this call arrived with."""
        declared = ctx.client_capabilities
        return json.dumps(declared.model_dump(mode="json", by_alias=True, exclude_none=True) if declared else None)

    @server.tool()
    async def silent(seconds: float) -> str:
        """Sleep without sending anything."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"


def transfer_tools(elicitation: "Elicitation", workspace: Workspace) -> None:
    from mcp_elicit.server import Accepted, Flow

    def transfer_on_ledger(amount: int, idempotency_key: str) -> str:
        workspace.ran("transfer")
        workspace.pause("before-transfer")
        workspace.book(idempotency_key, amount)
        workspace.pause("after-transfer")
        return f"receipt-{idempotency_key[-6:]}"

    @elicitation.tool()
    async def transfer(flow: Flow, amount: int) -> str:
        """Transfer an amount once a person confirms."""
        answer = await flow.ask(f"Transfer {amount}?", Confirm, key="confirm_transfer")
        if not (isinstance(answer, Accepted) and answer.data.confirm):
            return "not transferred"
        receipt = await flow.step("transfer", transfer_on_ledger, amount, flow.idempotency_key("transfer"))
        return f"transferred {amount}: {receipt}"


def ship_tools(elicitation: "Elicitation") -> None:
    from mcp_elicit.server import Accepted, Flow

    @elicitation.tool()
    async def ship(flow: Flow, version: str) -> str:
        """Ship a version once a person confirms; the question's secret word must never reach a webhook."""
        answer = await flow.ask(f"Ship {version} with the secret word swordfish?", Confirm, key="ship")
        return "shipped" if isinstance(answer, Accepted) and answer.data.confirm else "not shipped"


def overlap_tools(
    elicitation: "Elicitation", workspace: Workspace, *, work_seconds: float = 0.5, ponder: float = 0.0
) -> None:
    """`work` is slow (the calls overlap while it runs); `seal` is instant and follows it, so every call
    waiting on `work` reaches `seal` at the same moment: a claim taken without looking at the journal again
    runs it twice."""
    import anyio

    from mcp_elicit.server import Accepted, Flow

    def work(n: int, idempotency_key: str) -> str:
        workspace.log_run("work", n, idempotency_key)
        workspace.pause("work")
        time.sleep(work_seconds)
        return f"receipt-{uuid.uuid4().hex[:12]}"

    def seal(n: int, idempotency_key: str) -> str:
        workspace.log_run("seal", n, idempotency_key)
        return f"seal-{uuid.uuid4().hex[:8]}"

    @elicitation.tool()
    async def compute(flow: Flow, n: int) -> str:
        """A slow journaled step, then an instant one."""
        workspace.arrived(n)
        receipt = await flow.step("work", work, n, flow.idempotency_key("work"))
        sealed = await flow.step("seal", seal, n, flow.idempotency_key("seal"))
        return f"computed {n}: {receipt} {sealed}"

    @elicitation.tool()
    async def approve(flow: Flow, n: int) -> str:
        """A question to the person, then the slow step and the instant one."""
        answer = await flow.ask(f"Run job {n}?", Confirm, key="confirm")
        if not (isinstance(answer, Accepted) and answer.data.confirm):
            return f"job {n} not run: {type(answer).__name__}"
        receipt = await flow.step("work", work, n, flow.idempotency_key("work"))
        sealed = await flow.step("seal", seal, n, flow.idempotency_key("seal"))
        return f"approved {n}: {receipt} {sealed}"

    @elicitation.tool(name="ponder")
    async def ponder_tool(flow: Flow, n: int) -> str:
        """A question, then `ponder` seconds of work outside any step (nothing commits), then a step."""
        answer = await flow.ask(f"Ponder job {n}?", Confirm, key="confirm")
        await anyio.sleep(ponder)
        sealed = await flow.step("seal", seal, n, flow.idempotency_key("seal"))
        return f"pondered {n}: {type(answer).__name__} {sealed}"


def pending_tools(elicitation: "Elicitation") -> None:
    from mcp_elicit.server import Completed, Flow

    @elicitation.tool()
    async def connect_later(flow: Flow) -> str:
        """Connect an account in the browser; the call is retried until the flow is done."""
        outcome = await flow.ask_url(MESSAGE, key="connect", resume=ResumePolicy.NOTIFICATION)
        return CONNECTED if isinstance(outcome, Completed) else f"Not connected ({type(outcome).__name__.lower()})."


def waiting_tools(elicitation: "Elicitation", rounds_log: Path | None = None) -> None:
    from mcp_elicit.server import Accepted, Flow

    @elicitation.tool()
    async def approve(flow: Flow, n: int) -> str:
        """Ask whether to run job n; identical calls meanwhile wait on the same question."""
        if rounds_log is not None:
            with rounds_log.open("a") as log:
                log.write(f"{time.time()}\n")
        answer = await flow.ask(f"Run job {n}?", Confirm, key="confirm")
        if isinstance(answer, Accepted) and answer.data.confirm:
            return f"job {n} run"
        return f"job {n} not run: {type(answer).__name__}"


def task_tools(elicitation: "Elicitation", workspace: Workspace) -> None:
    import anyio
    from mcp.server.mcpserver.exceptions import ToolError

    from mcp_elicit.server import Accepted, Completed, Declined, Expired, Flow
    from mcp_elicit.server.tasks import TaskPolicy, TaskStart

    def plan(service: str) -> str:
        workspace.ran("plan")
        return f"plan for {service}"

    def prepare() -> str:
        workspace.ran("prepare")
        workspace.pause("prepare")
        return "prepared"

    def apply(service: str, idempotency_key: str) -> str:
        workspace.ran("apply")
        workspace.book(idempotency_key, service)
        return f"release-{idempotency_key[-6:]}"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def deploy(flow: Flow, service: str) -> str:
        """Deploy a service to production once a person approves."""
        planned = await flow.step("plan", plan, service)
        answer = await flow.ask(f"Apply the {planned}?", Approval, key="approve")
        if isinstance(answer, Declined):
            return "declined"
        if isinstance(answer, Expired):
            return "expired"
        if not (isinstance(answer, Accepted) and answer.data.approve):
            return "not deployed"
        await flow.step("prepare", prepare)
        release = await flow.step("apply", apply, service, flow.idempotency_key("apply"))
        return f"deployed {service} ({release})"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def hurry(flow: Flow) -> str:
        """A question that must be answered within a second."""
        answer = await flow.ask("Quick: approve?", Approval, key="quick", ttl=timedelta(seconds=1))
        return "expired" if isinstance(answer, Expired) else "answered"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def connect(flow: Flow) -> str:
        """Connect an account on the server's own page (URL mode)."""
        outcome = await flow.ask_url("Connect your account", key="connect_account")
        return "connected" if isinstance(outcome, Completed) else type(outcome).__name__.lower()

    @elicitation.tool(task=TaskPolicy.OPTIONAL, task_start=TaskStart.FLOW)
    async def change(flow: Flow, service: str) -> str:
        """Which window is asked on the call; the approval, which may take hours, inside the task."""
        window = await flow.ask(f"Which window for {service}?", Window, key="window")
        if not isinstance(window, Accepted):
            return "no window"
        await flow.begin_task()
        approval = await flow.ask(f"Approve {service} in the {window.data.window} window?", Approval, key="approve")
        approved = isinstance(approval, Accepted) and approval.data.approve
        return f"{service} {'changed' if approved else 'left'} in the {window.data.window} window"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def slow(flow: Flow, seconds: float) -> str:
        """Works for a while without asking anything."""
        await anyio.sleep(seconds)
        return f"slept {seconds:g} s"

    @elicitation.tool(task=TaskPolicy.REQUIRED)
    async def nightly(flow: Flow) -> str:
        """Runs only as a task."""
        return "nightly done"

    @elicitation.tool()
    async def plain(flow: Flow) -> str:
        """Never a task."""
        return "plain done"

    @elicitation.tool(task=TaskPolicy.OPTIONAL)
    async def broken(flow: Flow) -> str:
        """Reports a tool error."""
        raise ToolError("the deploy target is gone")


# -- the server -----------------------------------------------------------------------------------------


def build(options: Options) -> "tuple[Elicitation, MCPServer]":
    from mcp.server.mcpserver import MCPServer

    from mcp_elicit.server import Elicitation, IdentityPolicy, RequestState

    elicitation = Elicitation(
        open_store(options.store),
        request_state=RequestState(keys=KEYS),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        public_base_url=options.public_base_url,
        **_settings(options),
    )
    if options.lifespan:
        server = elicitation.server(options.name, version=VERSION, title=options.title)
    else:
        security = elicitation.request_state_security
        server = MCPServer(options.name, version=VERSION, title=options.title, request_state_security=security)
        elicitation.attach(server)
    for tool_set in options.tools:
        _install(tool_set, elicitation, server, options)
    return elicitation, server


def serve(options: Options) -> None:
    elicitation, server = build(options)
    try:
        if options.port is None:
            server.run("stdio")
            return
        import uvicorn

        app: ASGIApp = server.streamable_http_app(host="127.0.0.1")
        if options.die_after_round:
            app = _dying_after_round(app)
        uvicorn.run(app, host="127.0.0.1", port=options.port, log_level="warning")
    finally:
        elicitation.close()


def _settings(options: Options) -> dict[str, Any]:
    """`Elicitation` arguments for the options that are set; the others keep the runtime's defaults."""
    from mcp_elicit.server import Timing

    timing: dict[str, timedelta] = {}
    if options.long_poll is not None:
        timing["long_poll"] = timedelta(seconds=options.long_poll)
    if options.reask_after is not None:
        timing["reask_after"] = timedelta(seconds=options.reask_after)
    if options.lease is not None:
        timing["lease"] = timedelta(seconds=options.lease)
        if options.workspace is not None:
            options.workspace.mkdir(parents=True, exist_ok=True)
            (options.workspace / "lease").write_text(str(float(options.lease)))
    settings: dict[str, Any] = {"timing": Timing(**timing)}
    if options.task_poll is not None:
        from mcp_elicit.server.tasks import TaskSettings

        settings["tasks"] = TaskSettings(poll_interval=timedelta(seconds=options.task_poll))
    if options.webhook:
        settings["notifications"] = _fast_webhook()
    return settings


def _fast_webhook() -> "Notifications":
    from mcp_elicit.server import Notifications, Retry

    configured = Notifications.from_env(os.environ)
    if configured is None:
        raise SystemExit("--webhook: set MCP_ELICIT_WEBHOOK_URL and MCP_ELICIT_WEBHOOK_SECRET")
    fast = Retry(first=timedelta(seconds=0.3), factor=1.5, ceiling=timedelta(seconds=1), attempts=1000)
    return replace(configured, retry=fast, timeout=1.0, poll=timedelta(seconds=0.1))


def _install(tool_set: str, elicitation: "Elicitation", server: "MCPServer", options: Options) -> None:
    if tool_set == "flow":
        flow_tools(elicitation, Counter(_needed(options.effects, "flow", "--effects")))
    elif tool_set == "kit":
        kit_tools(server)
    elif tool_set == "transfer":
        transfer_tools(elicitation, _workspace(options, "transfer"))
    elif tool_set == "ship":
        ship_tools(elicitation)
    elif tool_set == "overlap":
        workspace = _workspace(options, "overlap")
        overlap_tools(elicitation, workspace, work_seconds=options.work_seconds, ponder=options.ponder)
    elif tool_set == "pending":
        pending_tools(elicitation)
    elif tool_set == "waiting":
        waiting_tools(elicitation, options.rounds_log)
    elif tool_set == "tasks":
        task_tools(elicitation, _workspace(options, "tasks"))
    else:
        raise ValueError(f"no tool set {tool_set!r}: choose from {', '.join(TOOL_SETS)}")


def _workspace(options: Options, tool_set: str) -> Workspace:
    return Workspace(_needed(options.workspace, tool_set, "--workspace"), stall=options.stall)


def _needed(path: Path | None, tool_set: str, option: str) -> Path:
    if path is None:
        raise ValueError(f"the {tool_set} tools keep their files where {option} says: give it")
    return path


def _dying_after_round(app: "ASGIApp") -> "ASGIApp":
    """The app, SIGKILLed the moment a response carrying a round's input requests is about to be sent: the
    round is durable, and nobody ever sees it."""
    from starlette.types import Message, Receive, Scope, Send

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_or_die(message: Message) -> None:
            if message["type"] == "http.response.body" and b'"inputRequests"' in message.get("body", b""):
                os.kill(os.getpid(), signal.SIGKILL)
            await send(message)

        await app(scope, receive, send_or_die)

    return guarded


# -- the command line -----------------------------------------------------------------------------------


def _options(arguments: argparse.Namespace) -> Options:
    tools = tuple(name for name in arguments.tools.split(",") if name)
    for name in tools:
        if name not in TOOL_SETS:
            raise SystemExit(f"--tools: no tool set {name!r}; choose from {', '.join(TOOL_SETS)}")
    return Options(
        store=arguments.store,
        tools=tools,
        port=arguments.port,
        name=arguments.name,
        title=arguments.title,
        public_base_url=arguments.public_base_url,
        lease=arguments.lease,
        long_poll=arguments.long_poll,
        reask_after=arguments.reask_after,
        task_poll=arguments.task_poll,
        lifespan=arguments.lifespan,
        webhook=arguments.webhook,
        die_after_round=arguments.die_after_round,
        workspace=arguments.workspace,
        effects=arguments.effects,
        stall=arguments.stall,
        work_seconds=arguments.work_seconds,
        ponder=arguments.ponder,
        rounds_log=arguments.rounds_log,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.server")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve over stdio, or over HTTP on --port")
    finish = commands.add_parser("complete", help="complete the store's one pending URL flow, as its page would")
    finish.add_argument("url", nargs="?", help="the page the browser was sent to (not fetched)")
    for command in (run, finish):
        command.add_argument("--store", default=os.environ.get(ENV_VAR), help=f"default: ${ENV_VAR}")
    run.add_argument("--tools", default="flow", help=f"comma-separated, of: {', '.join(TOOL_SETS)}")
    run.add_argument("--port", type=int, help="serve streamable HTTP on 127.0.0.1:PORT (default: stdio)")
    run.add_argument("--name", default=NAME)
    run.add_argument("--title")
    run.add_argument("--public-base-url")
    run.add_argument("--lease", type=float, help="seconds a step claim lasts unrenewed")
    run.add_argument("--long-poll", type=float, help="seconds a 2026-07-28 round may be held")
    run.add_argument("--reask-after", type=float)
    run.add_argument("--task-poll", type=float, help="the tasks' poll interval, seconds")
    run.add_argument("--no-lifespan", dest="lifespan", action="store_false")
    run.add_argument("--webhook", action="store_true", help="deliver the outbox to $MCP_ELICIT_WEBHOOK_URL, fast")
    run.add_argument("--die-after-round", action="store_true")
    run.add_argument("--workspace", type=Path)
    run.add_argument("--effects", type=Path, help="the flow tools' side-effect counts")
    run.add_argument("--stall", choices=STALLS)
    run.add_argument("--work-seconds", type=float, default=0.5)
    run.add_argument("--ponder", type=float, default=0.0)
    run.add_argument(
        "--rounds-log", type=Path, default=os.environ.get(ROUNDS_LOG) or None, help=f"default: ${ROUNDS_LOG}"
    )
    arguments = parser.parse_args()
    if arguments.store is None:
        parser.error(f"give --store or set {ENV_VAR}")
    if arguments.command == "complete":
        complete(arguments.store)
    else:
        serve(_options(arguments))


if __name__ == "__main__":
    main()
