"""OpenTelemetry through the API package: spans and metrics of real calls, on both eras and both stores.

The SDK's in-memory exporter and reader stand in for a collector: what they hold is what an exporter
would send. No attribute, event or metric may carry content (a message, an answer, an argument). The SDK's
client drives the calls, not `mcp_elicit.testing.Harness`: in most tests the person looks at or acts on the
store while the question is on screen (what is pending then, an operator's cancel, a sweep), and prompts
and resources are served too, which the harness does not call.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Awaitable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_REQUEST,
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    RequestParamsMeta,
    TextContent,
)
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from mcp_elicit.client import ElicitingClient, ScriptedHandler
from mcp_elicit.logging import TEXT_FORMAT, JsonFormatter
from mcp_elicit.model import Decision, DecisionStatus, Operator, ResumePolicy
from mcp_elicit.server import Accepted, Elicitation, Flow, RequestState, TaskPolicy, Timing
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY
from mcp_elicit.store import DecisionConflict, open_store
from mcp_elicit.testing import ControlledClock

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "2026-07-28"]
ERA_NAMES = {"legacy": "legacy", "2026-07-28": "mrtr"}
MESSAGE = "Release the kraken to production?"
NOTE = "zebra crossing noted"
SCOPE = "quokka-scope"
CONTENT = (MESSAGE, NOTE, SCOPE, "kraken", "zebra", "quokka")
"""Words no id, trace id or timestamp can contain."""
WAITED = timedelta(seconds=42)


class Approval(BaseModel):
    approve: bool
    note: str = ""


@dataclass
class Exported:
    """The SDK providers of this test module: spans in memory, metrics read as deltas and summed here."""

    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracing: TracerProvider
    seen: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.spans.clear()
        self.seen.clear()
        self.reader.get_metrics_data()

    def points(self) -> list[tuple[str, dict[str, Any], Any]]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    self.seen.append(metric.to_json())
                    if scope.scope.name != "mcp_elicit":
                        continue
                    for point in metric.data.data_points:
                        found.append((metric.name, dict(point.attributes or {}), point))
        return found


@dataclass
class Totals:
    """Metric values summed over the deltas read since the test began."""

    sums: dict[tuple[str, frozenset[tuple[str, Any]]], float] = field(default_factory=dict)
    counts: dict[tuple[str, frozenset[tuple[str, Any]]], int] = field(default_factory=dict)

    def add(self, points: list[tuple[str, dict[str, Any], Any]]) -> None:
        for name, attributes, point in points:
            key = (name, frozenset(attributes.items()))
            if isinstance(point, HistogramDataPoint):
                self.counts[key] = self.counts.get(key, 0) + point.count
                self.sums[key] = self.sums.get(key, 0.0) + point.sum
            else:
                self.sums[key] = self.sums.get(key, 0.0) + point.value

    def value(self, name: str, **attributes: str) -> float:
        return self.sums.get((name, _attributes(attributes)), 0.0)

    def count(self, name: str, **attributes: str) -> int:
        return self.counts.get((name, _attributes(attributes)), 0)

    def names(self) -> set[str]:
        return {name for name, _ in self.sums if self.sums[(name, _)] != 0}


def _attributes(given: dict[str, str]) -> frozenset[tuple[str, Any]]:
    return frozenset((f"mcp_elicit.{key}", value) for key, value in given.items())


@pytest.fixture(scope="module")
def providers() -> Iterator[Exported]:
    """The global SDK providers, set once: the API lets a process set them once, so this module owns them."""
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracing)
    delta = AggregationTemporality.DELTA
    reader = InMemoryMetricReader(preferred_temporality={Counter: delta, UpDownCounter: delta, Histogram: delta})
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    yield Exported(spans, reader, tracing)
    tracing.shutdown()  # the tests after this module keep no spans in memory


@pytest.fixture
def exported(providers: Exported) -> Exported:
    providers.start()
    return providers


@pytest.fixture
def elicitation(store_url: str, elicit_clock: ControlledClock) -> Iterator[Elicitation]:
    store = open_store(store_url, clock=elicit_clock)
    runtime = Elicitation(
        store,
        request_state=RequestState(single_process=True),
        clock=elicit_clock,
        timing=Timing(sweep_interval=None),
        public_base_url="http://127.0.0.1:8765",
    )
    runtime.server("telemetry-server")

    @runtime.tool()
    async def release(flow: Flow, scope: str) -> str:
        """Plan, ask, apply: a step, a question and another step."""
        planned = await flow.step("plan", lambda: f"plan for {scope}")
        answer = await flow.ask(MESSAGE, Approval, key="approve_release")
        if isinstance(answer, Accepted) and answer.data.approve:
            await flow.step("apply", lambda: 1)
            return f"applied {planned}: {answer.data.note}"
        return type(answer).__name__.lower()

    @runtime.tool()
    async def broken(flow: Flow) -> str:
        raise LookupError("the zebra is gone")

    @runtime.tool()
    async def connect(flow: Flow) -> str:
        outcome = await flow.ask_url(MESSAGE, key="connect_account")
        return type(outcome).__name__.lower()

    @runtime.tool()
    async def connect_later(flow: Flow) -> str:
        outcome = await flow.ask_url(MESSAGE, key="connect_account", resume=ResumePolicy.MANUAL)
        return type(outcome).__name__.lower()

    @runtime.tool()
    async def echo(flow: Flow, word: str) -> str:
        return word

    @runtime.tool(task=TaskPolicy.OPTIONAL)
    async def chore(flow: Flow) -> str:
        return "done"

    @runtime.tool(task=TaskPolicy.REQUIRED)
    async def long_chore(flow: Flow) -> str:
        return "done"

    @runtime.prompt()
    async def briefing(flow: Flow, topic: str) -> str:
        answer = await flow.ask(MESSAGE, Approval, key="brief")
        return f"brief on {topic}" if isinstance(answer, Accepted) else "no brief"

    @runtime.resource("notes://{name}", mime_type="text/plain")
    async def note(flow: Flow, name: str) -> str:
        answer = await flow.ask(MESSAGE, Approval, key="show")
        return f"note {name}" if isinstance(answer, Accepted) else "hidden"

    yield runtime
    runtime.close()


class Person:
    """Answers every question after `WAITED` on the runtime's clock; `meanwhile` runs before it answers."""

    def __init__(self, clock: ControlledClock, reply: ElicitResult, meanwhile: Any = None) -> None:
        self.clock = clock
        self.reply = reply
        self.meanwhile = meanwhile
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: ElicitRequestFormParams | ElicitRequestURLParams) -> ElicitResult:
        self.asked.append(params.message)
        self.clock.advance(WAITED)
        if self.meanwhile is not None:
            self.meanwhile()
        return self.reply


def accept() -> ElicitResult:
    return ElicitResult(action="accept", content={"approve": True, "note": NOTE})


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


async def call(elicitation: Elicitation, era: str, person: Person) -> CallToolResult:
    async with Client(elicitation.mcp_server, mode=era, elicitation_callback=person) as client:
        return await client.call_tool("release", {"scope": SCOPE})


def ours(exported: Exported) -> list[ReadableSpan]:
    return [
        s
        for s in exported.spans.get_finished_spans()
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == "mcp_elicit"
    ]


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_no_content(exported: Exported) -> None:
    """No span of any tracer (the SDK's included) nor any metric names what was asked, answered or passed."""
    for span in exported.spans.get_finished_spans():
        shown = span.to_json()
        for secret in CONTENT:
            assert secret not in shown, (secret, span.name)
    for metric in exported.seen:
        for secret in CONTENT:
            assert secret not in metric


@pytest.mark.parametrize("era", ERAS)
async def test_an_accepted_form_call_is_traced_and_counted(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock, era: str
) -> None:
    totals = Totals()
    pending_while_asked: list[float] = []

    def look() -> None:
        totals.add(exported.points())
        pending_while_asked.append(totals.value("mcp_elicit.decisions.pending"))

    person = Person(elicit_clock, accept(), meanwhile=look)
    result = await call(elicitation, era, person)
    assert text(result) == f"applied plan for {SCOPE}: {NOTE}"
    [decision] = elicitation.store.list_decisions(Operator())
    spans = ours(exported)

    calls = named(spans, "mcp_elicit.call")
    assert {attributes(s)["mcp_elicit.era"] for s in calls} == {ERA_NAMES[era]}
    assert all(attributes(s)["mcp_elicit.method"] == "tools/call" for s in calls)
    assert all(attributes(s)["mcp_elicit.target"] == "release" for s in calls)
    assert all(attributes(s)["mcp_elicit.operation.id"] == decision.operation_id for s in calls)
    expected_outcomes = ["result"] if era == "legacy" else ["input_required", "result"]
    assert [attributes(s)["mcp_elicit.outcome"] for s in calls] == expected_outcomes

    asks = named(spans, "mcp_elicit.ask")
    assert asks, "no ask span"
    for ask in asks:
        assert attributes(ask)["mcp_elicit.decision.id"] == decision.elicitation_id
        assert attributes(ask)["mcp_elicit.operation.id"] == decision.operation_id
        assert attributes(ask)["mcp_elicit.mode"] == "form"
        assert attributes(ask)["mcp_elicit.decision.key"] == "approve_release"
        assert attributes(ask)["mcp_elicit.era"] == ERA_NAMES[era]
    assert attributes(asks[-1])["mcp_elicit.outcome"] == "accepted"
    if era != "legacy":
        assert attributes(asks[0])["mcp_elicit.outcome"] == "signal"
        assert attributes(asks[0])["mcp_elicit.signal"] == "Suspend"

    steps = named(spans, "mcp_elicit.step")
    assert {attributes(s)["mcp_elicit.step.name"] for s in steps} == {"plan", "apply"}
    assert all(attributes(s)["mcp_elicit.operation.id"] == decision.operation_id for s in steps)

    [created] = named(spans, "mcp_elicit.store.create_decision")
    assert attributes(created)["mcp_elicit.decision.id"] == decision.elicitation_id
    [moved] = [s for s in named(spans, "mcp_elicit.store.transition") if attributes(s)["mcp_elicit.outcome"] == "moved"]
    assert attributes(moved)["mcp_elicit.status.from"] == "requested"
    assert attributes(moved)["mcp_elicit.status.to"] == "accepted"
    [finished] = named(spans, "mcp_elicit.store.finish_operation")
    assert attributes(finished)["mcp_elicit.outcome"] == "finished"
    assert attributes(finished)["mcp_elicit.status.to"] == "completed"
    call_traces = {s.context.trace_id for s in calls}
    assert moved.context.trace_id in call_traces and moved.parent is not None

    totals.add(exported.points())
    assert pending_while_asked == [1.0] * len(person.asked)
    assert totals.value("mcp_elicit.decisions.pending") == 0
    assert totals.value("mcp_elicit.decisions.outcomes", mode="form", outcome="accepted") == 1
    assert totals.count("mcp_elicit.decision.duration", mode="form", outcome="accepted") == 1
    waited = totals.value("mcp_elicit.decision.duration", mode="form", outcome="accepted")
    assert WAITED.total_seconds() <= waited < WAITED.total_seconds() + 30  # the clock moves by WAITED and runs on
    assert totals.names() <= {"mcp_elicit.decisions.outcomes", "mcp_elicit.decision.duration"}
    assert_no_content(exported)


@pytest.mark.parametrize("era", ERAS)
async def test_a_duplicate_completion_counts_a_conflict(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock, era: str
) -> None:
    seen: list[Decision] = []
    person = Person(elicit_clock, accept(), meanwhile=lambda: seen.extend(elicitation.store.list_decisions(Operator())))
    assert text(await call(elicitation, era, person)) == f"applied plan for {SCOPE}: {NOTE}"
    with pytest.raises(DecisionConflict):  # a late second callback, from the snapshot it saw while asked
        elicitation.store.transition(seen[-1], DecisionStatus.DECLINED, caller=Operator(), reason="again")
    totals = Totals()
    totals.add(exported.points())
    assert totals.value("mcp_elicit.conflicts", subject="decision") == 1
    assert totals.value("mcp_elicit.decisions.outcomes", mode="form", outcome="accepted") == 1
    assert totals.value("mcp_elicit.decisions.outcomes", mode="form", outcome="declined") == 0
    assert_no_content(exported)


async def test_an_answer_that_loses_to_an_operator_counts_a_conflict(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock
) -> None:
    """A legacy call waits on the live request while an operator cancels; on 2026-07-28 the next round
    reads the decision afresh and has nothing to lose."""

    def cancel_meanwhile() -> None:
        [open_decision] = elicitation.store.list_decisions(Operator())
        elicitation.store.transition(open_decision, DecisionStatus.CANCELLED, caller=Operator(), reason="ops")

    result = await call(elicitation, "legacy", Person(elicit_clock, accept(), meanwhile=cancel_meanwhile))
    assert text(result) == "cancelled"
    totals = Totals()
    totals.add(exported.points())
    assert totals.value("mcp_elicit.conflicts", subject="decision") == 1
    assert totals.value("mcp_elicit.decisions.outcomes", mode="form", outcome="cancelled") == 1
    assert totals.value("mcp_elicit.decisions.outcomes", mode="form", outcome="accepted") == 0
    assert totals.value("mcp_elicit.decisions.pending") == 0
    transitions = named(ours(exported), "mcp_elicit.store.transition")
    lost = [s for s in transitions if attributes(s)["mcp_elicit.outcome"] == "conflict"]
    assert [attributes(s)["mcp_elicit.status.to"] for s in lost] == ["accepted"]
    assert_no_content(exported)


@pytest.mark.parametrize("era", ERAS)
async def test_a_question_swept_while_asked_counts_an_expiration(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock, era: str
) -> None:
    def expire_meanwhile() -> None:
        elicit_clock.advance(timedelta(hours=1))
        assert elicitation.store.sweep_expired().decisions == 1

    result = await call(elicitation, era, Person(elicit_clock, accept(), meanwhile=expire_meanwhile))
    assert text(result) == "expired"
    totals = Totals()
    totals.add(exported.points())
    assert totals.value("mcp_elicit.expirations", subject="decision") == 1
    assert totals.value("mcp_elicit.decisions.pending") == 0
    assert totals.value("mcp_elicit.decisions.outcomes", mode="form", outcome="accepted") == 0
    sweeps = named(ours(exported), "mcp_elicit.store.sweep")
    [swept] = [s for s in sweeps if attributes(s)["mcp_elicit.expired.decisions"] == 1]
    assert attributes(swept)["mcp_elicit.outcome"] == "swept"
    assert_no_content(exported)


@pytest.mark.parametrize("era", ERAS)
async def test_a_refused_url_question_is_traced_and_counted(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock, era: str
) -> None:
    person = Person(elicit_clock, ElicitResult(action="decline"))
    async with Client(elicitation.mcp_server, mode=era, elicitation_callback=person) as client:
        result = await client.call_tool("connect", {})
    assert text(result) == "declined"
    [decision] = elicitation.store.list_decisions(Operator())
    asks = named(ours(exported), "mcp_elicit.ask")
    assert {attributes(s)["mcp_elicit.mode"] for s in asks} == {"url"}
    assert {attributes(s)["mcp_elicit.decision.id"] for s in asks} == {decision.elicitation_id}
    assert attributes(asks[-1])["mcp_elicit.outcome"] == "declined"
    totals = Totals()
    totals.add(exported.points())
    assert totals.value("mcp_elicit.decisions.outcomes", mode="url", outcome="declined") == 1
    assert totals.count("mcp_elicit.decision.duration", mode="url", outcome="declined") == 1
    assert totals.value("mcp_elicit.decisions.pending") == 0
    assert_no_content(exported)


@pytest.mark.parametrize("era", ERAS)
async def test_prompts_and_resources_served_through_the_runtime_are_traced(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock, era: str
) -> None:
    person = Person(elicit_clock, accept())
    async with Client(elicitation.mcp_server, mode=era, elicitation_callback=person) as client:
        prompt = await client.get_prompt("briefing", {"topic": SCOPE})
        read = await client.read_resource("notes://plans")
    assert prompt.messages and read.contents
    served = {
        (attributes(s)["mcp_elicit.method"], attributes(s)["mcp_elicit.target"], attributes(s)["mcp_elicit.outcome"])
        for s in named(ours(exported), "mcp_elicit.call")
    }
    assert ("prompts/get", "briefing", "result") in served
    assert ("resources/read", "notes://{name}", "result") in served
    modes = {attributes(s)["mcp_elicit.outcome"] for s in named(ours(exported), "mcp_elicit.ask")}
    assert "accepted" in modes
    assert_no_content(exported)


def test_a_record_names_the_ids_it_is_given() -> None:
    record = logging.LogRecord("mcp_elicit.web", logging.INFO, __file__, 1, "decision %s answered", ("d-1",), None)
    record.decision_id = "d-1"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["decision_id"] == "d-1"
    assert parsed["message"] == "decision d-1 answered"
    assert parsed["level"] == "INFO" and parsed["logger"] == "mcp_elicit.web"


async def test_a_record_logged_while_a_question_is_out_names_the_decision_and_the_operation(
    elicitation: Elicitation,
) -> None:
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("mcp_elicit")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)

    async def refuse(context: Any, params: ElicitRequestFormParams | ElicitRequestURLParams) -> ErrorData:
        return ErrorData(code=INVALID_REQUEST, message=f"{NOTE}: not now")

    try:
        async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=refuse) as client:
            result = await client.call_tool("release", {"scope": SCOPE})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert text(result) == "cancelled"
    [decision] = elicitation.store.list_decisions(Operator())
    records = [json.loads(line) for line in lines.getvalue().splitlines()]
    [refused] = [r for r in records if r["message"].startswith("client refused elicitation")]
    assert refused["decision_id"] == decision.elicitation_id
    assert refused["operation_id"] == decision.operation_id
    assert (refused["method"], refused["target"]) == ("tools/call", "release")
    assert not any(secret in lines.getvalue() for secret in CONTENT)


class Ended(logging.Handler):
    """The records of served calls' ends, formatted as JSON where they are made; `arrived` is set by each."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []
        self.texts: list[str] = []
        self.records: list[logging.LogRecord] = []
        self.span_ids: list[int] = []
        """The span current where each record was made: a log bridge links the record to it."""
        self.arrived = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.span_ids.append(trace.get_current_span().get_span_context().span_id)
        self.lines.append(json.loads(self.format(record)))
        self.texts.append(record.getMessage())
        self.records.append(record)
        self.arrived.set()
        self.arrived = anyio.Event()


@pytest.fixture
def ended() -> Iterator[Ended]:
    handler = Ended()
    logger = logging.getLogger("mcp_elicit.telemetry.calls")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def how(line: dict[str, Any]) -> tuple[str, str, str, str]:
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert line["level"] == "INFO"
    return line["method"], line["target"], line["era"], line["outcome"]


async def test_every_served_call_ends_with_one_log_line_saying_how(
    elicitation: Elicitation, elicit_clock: ControlledClock, ended: Ended
) -> None:
    person = Person(elicit_clock, accept())
    assert text(await call(elicitation, "2026-07-28", person)).startswith("applied")
    assert [how(line) for line in ended.lines] == [
        ("tools/call", "release", "mrtr", "input_required"),
        ("tools/call", "release", "mrtr", "result"),
    ], "a round ends the call's turn, and the retry that answers it is a call of its own"
    [decision] = elicitation.store.list_decisions(Operator())
    assert {line["operation_id"] for line in ended.lines} == {decision.operation_id}
    assert ended.texts[1].startswith("tools/call release ended: result after ")
    assert ended.texts[1].endswith(f" ms (era mrtr, operation {decision.operation_id})")

    async def once(made: Awaitable[object]) -> tuple[tuple[str, str, str, str], dict[str, Any], str]:
        """How the one call `made` ended: its line's ids and outcome, the rest of its JSON, and its text."""
        before = len(ended.lines)
        with suppress(MCPError):
            await made
        assert len(ended.lines) == before + 1, "exactly one line per call, however it ends"
        line = ended.lines[-1]
        said = logging.Formatter(TEXT_FORMAT).format(ended.records[-1])
        assert said.startswith("INFO mcp_elicit.telemetry.calls: ") and said.endswith(ended.texts[-1])
        rest = {k: v for k, v in line.items() if k not in ("time", "level", "logger", "message", "duration_ms")}
        return how(line), rest, ended.texts[-1]

    def said(target: str, how: str, era: str, operation: str | None) -> str:
        ending = rf"tools/call {target} ended: {re.escape(how)} after \d+\.\d ms"
        return ending + rf" \(era {era}, operation {operation or 'none'}\)"

    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=person) as client:
        ways, rest, line = await once(client.call_tool("release", {"scope": SCOPE}))
        assert ways == ("tools/call", "release", "legacy", "replayed")
        assert re.fullmatch(said("release", "replayed", "legacy", decision.operation_id), line)
        ways, rest, line = await once(client.call_tool("connect_later", {}))
        assert ways == ("tools/call", "connect_later", "legacy", "input_required") and rest["error_code"] == -32042
        later = next(d for d in elicitation.store.list_decisions(Operator()) if d.key == "connect_account")
        assert re.fullmatch(said("connect_later", "input_required (-32042)", "legacy", later.operation_id), line)

    async with Client(elicitation.mcp_server, mode="2026-07-28") as client:
        ways, rest, line = await once(client.call_tool("release", {"scope": "elsewhere"}))
        assert ways == ("tools/call", "release", "mrtr", "cannot_ask") and rest["needs"] == "elicitation.form"
        assert "signal" not in rest and "error_type" not in rest
        assert re.fullmatch(said("release", "cannot_ask (elicitation.form)", "mrtr", rest["operation_id"]), line)

        ways, rest, line = await once(client.call_tool("broken", {}))
        assert ways == ("tools/call", "broken", "mrtr", "error") and rest["error_type"] == "LookupError"
        assert re.fullmatch(said("broken", "error (LookupError)", "mrtr", rest["operation_id"]), line)

        keyed = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: "turn-1"})
        ways, rest, line = await once(client.call_tool("echo", {"word": "one"}, meta=keyed))
        assert ways == ("tools/call", "echo", "mrtr", "result")
        ways, rest, line = await once(client.call_tool("echo", {"word": "two"}, meta=keyed))
        assert ways == ("tools/call", "echo", "mrtr", "refused"), "the key names another request"
        assert rest["error_code"] == -32602 and "operation_id" not in rest
        assert re.fullmatch(said("echo", "refused (-32602)", "mrtr", None), line)

        ways, rest, line = await once(client.call_tool("long_chore", {}))
        assert ways == ("tools/call", "long_chore", "mrtr", "refused"), "a task the client did not declare"
        assert rest["error_code"] == -32021 and re.fullmatch(said("long_chore", "refused (-32021)", "mrtr", None), line)

    async with ElicitingClient(elicitation.mcp_server, ScriptedHandler([]), era="2025-06-18") as kit:
        ways, rest, line = await once(kit.call_tool("long_chore", {}))
    assert ways == ("tools/call", "long_chore", "legacy", "refused"), "refused before anything ran"
    assert rest["error_code"] == -32602 and re.fullmatch(said("long_chore", "refused (-32602)", "legacy", None), line)

    before = len(ended.lines)
    async with ElicitingClient(elicitation.mcp_server, ScriptedHandler([]), era="2026-07-28", tasks=True) as kit:
        await kit.call_tool("chore", {})
    with anyio.fail_after(10):
        while len(ended.lines) < before + 2:
            await ended.arrived.wait()
    # The call that became a task logs `task`; the task's body, run in the background, logs its own end.
    [accepted] = [i for i in range(before, len(ended.lines)) if ended.lines[i]["era"] == "mrtr"]
    [background] = [i for i in range(before, len(ended.lines)) if ended.lines[i]["era"] == "task"]
    assert len(ended.lines) == before + 2
    rest = ended.lines[accepted]
    assert how(rest) == ("tools/call", "chore", "mrtr", "task")
    task = rest["task_id"]
    line = ended.texts[accepted]
    assert rest["operation_id"] and re.fullmatch(said("chore", f"task ({task})", "mrtr", rest["operation_id"]), line)
    assert how(ended.lines[background]) == ("tools/call", "chore", "task", "result")
    assert re.fullmatch(said("chore", "result", "task", task), ended.texts[background])
    assert not any(secret in json.dumps(ended.lines) for secret in CONTENT)


async def test_a_calls_end_is_logged_inside_its_span_so_traces_and_logs_link(
    elicitation: Elicitation, exported: Exported, elicit_clock: ControlledClock, ended: Ended
) -> None:
    assert text(await call(elicitation, "2026-07-28", Person(elicit_clock, accept()))).startswith("applied")
    calls = named(ours(exported), "mcp_elicit.call")
    assert len(calls) == len(ended.span_ids) == 2
    assert ended.span_ids == [span.context.span_id for span in calls if span.context is not None]


async def test_a_call_the_client_gives_up_logs_its_end_as_cancelled(
    elicitation: Elicitation, elicit_clock: ControlledClock, ended: Ended
) -> None:
    giving_up = anyio.CancelScope()

    async def walk_away(context: Any, params: ElicitRequestFormParams | ElicitRequestURLParams) -> ElicitResult:
        giving_up.cancel()
        await anyio.sleep_forever()
        raise AssertionError("cancelled above")

    async with Client(elicitation.mcp_server, mode="legacy", elicitation_callback=walk_away) as client:
        arrived = ended.arrived
        with giving_up:
            await client.call_tool("release", {"scope": SCOPE})
        with anyio.fail_after(10):
            await arrived.wait()
    [line] = ended.lines
    assert how(line) == ("tools/call", "release", "legacy", "cancelled")
