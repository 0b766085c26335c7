"""`Harness`: call the tools of an `Elicitation`-backed server in process, on a chosen era, with scripted answers.

Each call is what a host makes: a fresh connection of the client kit (`ElicitingClient`) over the SDK's
in-memory transport, on the era asked for, with the scripted person as its handler and the stand-in browser
as its URL opener. Nothing of the server is replaced: its runtime, its era adapters and its store run as in
production, so a test sees what a user of the tool would, and the store's records say what became durable.

The assertions read the app's own store: the audit trail of a question, the journal of a call's operation,
and how often each question was put to the person (the one number a durable tool must keep at one across
retries, overlapping calls and eras).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, get_args

import anyio
import anyio.to_thread
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ListToolsResult, TextContent

from mcp_elicit.client import ElicitingClient, Mode, PendingFlows, SdkOptions
from mcp_elicit.model import AuditEntry, Decision, JSONValue, Operation, Principal, request_digest
from mcp_elicit.server import ANSWERS_ARGUMENT, REPLAYED_META_KEY, Elicitation
from mcp_elicit.store import SweepResult
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.testing.clock import ControlledClock
from mcp_elicit.testing.person import TESTING, BrowserStandIn, Encounters, Question, ScriptedPerson
from mcp_elicit.testing.script import Answers, Script

if TYPE_CHECKING:
    from fastmcp import FastMCP

EraName: TypeAlias = Literal["2025-06-18", "2025-11-25", "2026-07-28"]
ERAS: Final[tuple[EraName, ...]] = get_args(EraName)
"""Every protocol era a tool body runs on, oldest first."""
DEFAULT_TIMEOUT = 30.0
"""Seconds a call may take in real time: a scripted call that takes longer is stuck, not slow."""
ServerUnderTest: TypeAlias = "Server[Any] | MCPServer | FastMCP[Any]"
"""What a `Harness` calls: an `MCPServer`, a lowlevel `Server` running its tools through `Elicitation.run_tool`,
or a FastMCP built with `FastMCPFlows` (`pip install "mcp-elicit[fastmcp]"`)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One finished call: its result, the questions it put to the person, and the operation it ran in."""

    tool: str
    arguments: Mapping[str, Any]
    era: EraName
    result: CallToolResult
    asked: tuple[Question, ...]
    operation_id: str | None
    """The durable operation behind the call; None when the server started none (a refused call)."""

    @property
    def text(self) -> str:
        """The text of a successful result; a tool error fails the test with the error's text."""
        if self.result.is_error:
            raise AssertionError(f"the tool {self.tool!r} on {self.era} failed: {_text(self.result)}")
        return _text(self.result)

    @property
    def error(self) -> str:
        """The text of a tool error; a successful result fails the test."""
        if not self.result.is_error:
            raise AssertionError(f"the tool {self.tool!r} on {self.era} succeeded: {_text(self.result)}")
        return _text(self.result)

    @property
    def replayed(self) -> bool:
        """Whether the server handed over an identical call's recorded result instead of running the body."""
        return _replayed(self.result)


class Harness:
    """Calls the tools of one `Elicitation` in process and asserts on what its store recorded.

    `era` is the era of every call unless a call names its own; `timeout` bounds each call in real time.
    `server` is what the calls go to: by default the `MCPServer` of `elicitation.server(...)`; a lowlevel
    `Server` running its tools through `elicitation.run_tool`, or the FastMCP of
    `FastMCPFlows(elicitation).server(...)`, is passed here.
    Time moves only if the app runs on a `ControlledClock` (`Elicitation(..., clock=clock)`, which opens its
    store on the same clock): then `clock.advance(...)` makes TTLs run out without waiting.
    """

    def __init__(
        self,
        elicitation: Elicitation,
        *,
        era: EraName = "2026-07-28",
        timeout: float = DEFAULT_TIMEOUT,
        server: ServerUnderTest | None = None,
    ) -> None:
        self.elicitation = elicitation
        self.server = server
        self._connected_to = None if server is None else _in_process(server, elicitation)
        self._fills_defaults = not isinstance(server, Server)  # MCPServer and FastMCP do; a lowlevel Server does not
        self.era = _checked_era(era)
        self.timeout = timeout
        self.asked: list[Question] = []
        """Every question put to the scripted person in this harness's calls, in order."""
        self._store = AsyncStore(elicitation.store)
        self._principal: Principal = elicitation.identity.principal_for(None)

    @property
    def clock(self) -> ControlledClock:
        """The app's clock, which the test moves; a clear error when the app runs on the wall clock."""
        clock = self._controlled_clock()
        if clock is None:
            raise RuntimeError(
                "this Elicitation runs on the wall clock, which no test can move: build it with "
                "Elicitation(store_url, ..., clock=ControlledClock()) (the elicit_clock fixture)"
            )
        return clock

    @property
    def principal(self) -> Principal:
        """Who every in-process call runs as: the app's local principal (`IdentityPolicy.local_principal`)."""
        return self._principal

    # -- calling ----------------------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        answers: Answers | Script | None = None,
        era: EraName | None = None,
        modes: Sequence[Mode] = ("form", "url"),
        sdk: SdkOptions | None = None,
        timeout: float | None = None,
    ) -> ToolCall:
        """Call `tool` as a host would, the scripted person answering by question key.

        `modes` is what the client declares (`()` for a client that cannot be asked at all). A question the
        script does not cover is answered cancel, and the call then fails the test with `UnscriptedQuestion`;
        so does any other misfit of the script (`ScriptFailure`). Errors of the call itself (a `-32021`, the
        kit's `KitError`s) are raised as the client kit raises them.

        `sdk` carries the host's own callbacks for what a tool asks of the client rather than the person
        (`SdkOptions(sampling_callback=..., list_roots_callback=...)` for `flow.sample` and `flow.roots`):
        the client declares sampling and roots only with a callback for them, as a real host does, so a
        test of a tool that asks the model scripts the model here.
        """
        script = answers if isinstance(answers, Script) else Script(answers or {})
        chosen = _checked_era(era or self.era)
        limit = self.timeout if timeout is None else timeout
        given = dict(arguments or {})
        server = self._target()
        encounters = Encounters(era=chosen, tool=tool)
        result: CallToolResult | None = None
        defaults: dict[str, Any] = {}
        raised: Exception | None = None
        with anyio.move_on_after(limit) as bounded:
            async with anyio.create_task_group() as browsing:
                clock, pending = self._controlled_clock(), PendingFlows()
                browser = BrowserStandIn(self._store, browsing, encounters, pending, clock=clock, timeout=limit)
                person = ScriptedPerson(self._store, script, encounters, browser, modes=modes, clock=clock)
                try:
                    async with ElicitingClient(
                        server, person, era=chosen, opener=browser, pending=pending, sdk=sdk
                    ) as kit:
                        result = await kit.call_tool(tool, given)
                        if self._fills_defaults and not encounters.asked and not _replayed(result):
                            defaults = _defaults(await kit.list_tools(), tool)
                except Exception as error:
                    raised = error
                finally:
                    browsing.cancel_scope.cancel()
        self.asked.extend(encounters.asked)
        if encounters.failures:
            raise encounters.failures[0] from raised
        if raised is not None:
            raise raised
        if bounded.cancelled_caught or result is None:
            shown = ", ".join(repr(question.key) for question in encounters.asked) or "nothing"
            raise AssertionError(f"the call of {tool!r} on {chosen} did not end within {limit:g} s; it asked {shown}")
        operation_id = await self._operation_of(tool, given, encounters.asked, result, defaults)
        return ToolCall(tool, given, chosen, result, tuple(encounters.asked), operation_id)

    async def sweep(self) -> SweepResult:
        """Expire what is overdue now, as the served app's sweeper does on its own every `Timing.sweep_interval`."""
        return await anyio.to_thread.run_sync(self.elicitation.store.sweep_expired)

    # -- what the store recorded ------------------------------------------------------------------

    def decisions(self, key: str | None = None, *, call: ToolCall | None = None) -> list[Decision]:
        """The store's decisions (of one key, of one call's operation), newest first."""
        operation_id = self._operation_id(call) if call is not None else None
        listed = self.elicitation.store.list_decisions(TESTING, operation_id=operation_id, limit=1000)
        return [decision for decision in listed if key is None or decision.key == key]

    def decision(self, key: str, *, call: ToolCall | None = None) -> Decision:
        """The newest decision asked under `key` (in `call`'s operation, when given)."""
        found = self.decisions(key, call=call)
        if not found:
            keys = sorted({decision.key for decision in self.decisions(call=call)})
            raise AssertionError(f"no question {key!r} was recorded; the store holds {keys or 'no questions'}")
        return found[0]

    def times_asked(self, key: str) -> int:
        """How many times the question `key` was put to the person, and answered, in this harness's calls."""
        return sum(1 for question in self.asked if question.key == key)

    def assert_asked_once(self, key: str) -> Question:
        """The question `key` reached the person exactly once, whatever the retries, rounds and eras."""
        matching = [question for question in self.asked if question.key == key]
        if len(matching) != 1:
            where = "; ".join(f"{q.tool} on {q.era}" for q in matching)
            asked = ", ".join(sorted({q.key for q in self.asked})) or "nothing"
            raise AssertionError(
                f"the question {key!r} was asked {len(matching)} times" + (f" ({where})" if where else "")
                + f"; the person was asked {asked}"
            )  # fmt: skip
        return matching[0]

    def audit(self, key: str, *, call: ToolCall | None = None) -> list[AuditEntry]:
        """The transitions of the newest decision asked under `key`, oldest first."""
        return self.elicitation.store.audit_trail(self.decision(key, call=call).elicitation_id, TESTING)

    def assert_audit(self, key: str, statuses: Sequence[str], *, call: ToolCall | None = None) -> list[AuditEntry]:
        """The decision `key` went through exactly `statuses` (`["requested", "accepted"]`); returns the rows."""
        trail = self.audit(key, call=call)
        seen = [entry.to_status for entry in trail]
        if seen != list(statuses):
            rows = "\n".join(
                f"  {entry.from_status or '-'} -> {entry.to_status} by {entry.actor}: {entry.reason}" for entry in trail
            )
            raise AssertionError(f"the audit trail of {key!r} is {seen}, not {list(statuses)}:\n{rows}")
        return trail

    def operation(self, call: ToolCall) -> Operation:
        """The operation `call` ran in, as stored now (its status, its recorded result)."""
        return self.elicitation.store.get_operation(self._operation_id(call), TESTING)

    def journal(self, call: ToolCall, name: str) -> JSONValue:
        """The recorded result of the step `name` in `call`'s operation; a step never journaled fails the test."""
        operation = self.operation(call)
        entry = self.elicitation.store.journal_get(operation.operation_id, name, caller=operation.principal)
        if entry is None:
            raise AssertionError(f"the step {name!r} of the call of {call.tool!r} was never journaled")
        return entry.value

    def assert_journal(self, call: ToolCall, expected: Mapping[str, JSONValue]) -> None:
        """Each named step of `call`'s operation is journaled with the expected result."""
        for name, value in expected.items():
            recorded = self.journal(call, name)
            if recorded != value:
                raise AssertionError(f"the step {name!r} journaled {recorded!r}, not {value!r}")

    def assert_not_journaled(self, call: ToolCall, *names: str) -> None:
        """None of these steps ran to completion in `call`'s operation (a declined deploy applies nothing)."""
        operation = self.operation(call)
        store = self.elicitation.store
        done = [name for name in names if store.journal_get(operation.operation_id, name, caller=operation.principal)]
        if done:
            raise AssertionError(f"the call of {call.tool!r} journaled {', '.join(map(repr, done))}")

    # -- internals --------------------------------------------------------------------------------

    def _target(self) -> Server[Any] | MCPServer:
        if self._connected_to is not None:
            return self._connected_to
        try:
            return self.elicitation.mcp_server
        except RuntimeError:
            raise RuntimeError(
                "the Harness calls the MCPServer of Elicitation.server(...), and this Elicitation has none: build "
                "it, or pass the server to call (Harness(app, server=...), or the elicit_server fixture), e.g. "
                "the FastMCP of FastMCPFlows(app).server(...)"
            ) from None

    def _controlled_clock(self) -> ControlledClock | None:
        clock = self.elicitation.clock
        return clock if isinstance(clock, ControlledClock) else None

    def _operation_id(self, call: ToolCall) -> str:
        if call.operation_id is None:
            raise AssertionError(f"the call of {call.tool!r} on {call.era} ran in no operation the store holds")
        return call.operation_id

    async def _operation_of(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        asked: Sequence[Question],
        result: CallToolResult,
        defaults: Mapping[str, Any],
    ) -> str | None:
        """The call's operation: named by a question it asked or by a replayed result, else found by its digest.

        The digest is the runtime's: the tool's name and its arguments as the body receives them (`defaults`,
        the input schema's, filled in where the server fills them in), the `elicit_answers` argument left out.
        """
        if asked:
            return asked[-1].operation_id
        replayed = (result.meta or {}).get(REPLAYED_META_KEY)
        if isinstance(replayed, dict) and isinstance(replayed.get("operationId"), str):
            return str(replayed["operationId"])
        received = {**defaults, **arguments}
        received.pop(ANSWERS_ARGUMENT, None)
        digest = request_digest("tools/call", {"name": tool, "arguments": received})
        store = self._store
        found = await store.find_operations(self._principal, method="tools/call", target=tool, request_digest=digest)
        return found[0].operation_id if found else None


def _in_process(server: ServerUnderTest, elicitation: Elicitation) -> Server[Any] | MCPServer:
    if isinstance(server, Server | MCPServer):
        return server
    fastmcp = sys.modules.get("fastmcp")  # loaded wherever a FastMCP exists; never imported here
    if fastmcp is None or not isinstance(server, fastmcp.FastMCP):
        raise TypeError(
            "server is an MCPServer, a lowlevel Server or the FastMCP of FastMCPFlows(app).server(...), "
            f"not {type(server).__name__}"
        )
    from mcp_elicit.fastmcp import in_process

    return in_process(server, elicitation)


def _defaults(listing: ListToolsResult, tool: str) -> dict[str, Any]:
    """The default of each argument of `tool`'s input schema that has one."""
    for listed in listing.tools:
        if listed.name == tool:
            properties = listed.input_schema.get("properties", {})
            return {
                name: schema["default"]
                for name, schema in properties.items()
                if isinstance(schema, dict) and "default" in schema
            }
    return {}


def _checked_era(era: str) -> EraName:
    if era not in ERAS:
        raise ValueError(f"an era is one of {', '.join(ERAS)}: got {era!r}")
    return era


def _replayed(result: CallToolResult) -> bool:
    return result.meta is not None and REPLAYED_META_KEY in result.meta


def _text(result: CallToolResult) -> str:
    return "\n".join(content.text for content in result.content if isinstance(content, TextContent))
